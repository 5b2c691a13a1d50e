package manager

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// A family that becomes degraded gets one Warning, and one Normal Event
// when it recovers; nothing while it stays as it is.
func TestDegradedFamiliesAreSaidOnce(t *testing.T) {
	state := map[string]int64{}
	rec := record.NewFakeRecorder(10)
	d := &degradedEvents{degraded: func() map[string]int64 { return state }, recorder: rec,
		lease: &corev1.ObjectReference{Kind: "Lease", Namespace: "kube-system", Name: "cloud-controller-manager"}}
	steps := []struct {
		state map[string]int64
		want  []string
	}{
		{map[string]int64{}, nil},
		{map[string]int64{"sim/loadbalancers": 16}, []string{"Warning CloudCallsDegraded Provider method family sim/loadbalancers has 16 calls"}},
		{map[string]int64{"sim/loadbalancers": 20}, nil},
		{map[string]int64{"sim/loadbalancers": 20, "sim/instances": 16}, []string{"Warning CloudCallsDegraded Provider method family sim/instances"}},
		{map[string]int64{"sim/instances": 16}, []string{"Normal CloudCallsRecovered Provider method family sim/loadbalancers recovered"}},
	}
	for i, s := range steps {
		state = s.state
		d.check()
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		if len(got) != len(s.want) {
			t.Fatalf("step %d: Events %q, want %d", i, got, len(s.want))
		}
		for j := range got {
			if !strings.HasPrefix(got[j], s.want[j]) {
				t.Errorf("step %d: Event %q, want %q...", i, got[j], s.want[j])
			}
		}
	}
	if got := degradedList(func() map[string]int64 { return map[string]int64{"sim/routes": 17} })(); len(got) != 1 || got[0] != "sim/routes: 17 calls hung" {
		t.Errorf("console list %q", got)
	}
}
