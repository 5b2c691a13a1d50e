package service

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/platform"
)

func TestIsBackend(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		ready  corev1.ConditionStatus
		del    *metav1.Time
		want   bool
	}{
		{name: "plain node", want: true},
		{name: "not ready still serves (KEP-3458)", ready: corev1.ConditionFalse, want: true},
		{name: "exclude label true", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "true"}, want: false},
		{name: "exclude label empty is not a boolean: excluded", labels: map[string]string{corev1.LabelNodeExcludeBalancers: ""}, want: false},
		{name: "exclude label false keeps the node", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "false"}, want: true},
		{name: "exclude label FALSE keeps the node", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "FALSE"}, want: true},
		{name: "exclude label garbage excludes", labels: map[string]string{corev1.LabelNodeExcludeBalancers: "maybe"}, want: false},
		{name: "autoscaler taint", taints: []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}, want: false},
		{name: "other taint", taints: []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}, want: true},
		{name: "being deleted", del: &now, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tt.labels, DeletionTimestamp: tt.del}}
			n.Spec.Taints = tt.taints
			if tt.ready != "" {
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: tt.ready}}
			}
			if got := IsBackend(n); got != tt.want {
				t.Errorf("IsBackend = %v, want %v", got, tt.want)
			}
		})
	}
}

// As upstream's shouldSyncUpdatedNode: only the exclusion label and the
// providerID start a sync; the autoscaler taint, readiness, addresses and a
// deletion timestamp do not (the taint still leaves the backends at the next
// sync: backendsStale).
func TestNodeUpdates(t *testing.T) {
	base := func() *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		n.Spec.ProviderID = "sim://i-1"
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}}
		return n
	}
	now := metav1.Now()
	tests := []struct {
		name        string
		mutate      func(*corev1.Node)
		sync, stale bool
	}{
		{name: "heartbeat", mutate: func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
		}},
		{name: "unrelated label", mutate: func(n *corev1.Node) { n.Labels = map[string]string{"team": "a"} }},
		{name: "excluded", mutate: func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"} }, sync: true, stale: true},
		{name: "exclude label false", mutate: func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "false"} }},
		{name: "autoscaler taint", mutate: func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint}} }, stale: true},
		{name: "being deleted", mutate: func(n *corev1.Node) { n.DeletionTimestamp = &now }, stale: true},
		{name: "providerID set", mutate: func(n *corev1.Node) { n.Spec.ProviderID = "sim://i-2" }, sync: true, stale: true},
		{name: "address changed", mutate: func(n *corev1.Node) { n.Status.Addresses[0].Address = "198.18.0.2" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base()
			tt.mutate(cur)
			if got := shouldSyncUpdatedNode(base(), cur); got != tt.sync {
				t.Errorf("shouldSyncUpdatedNode = %v, want %v", got, tt.sync)
			}
			if got := backendsStale(base(), cur); got != tt.stale {
				t.Errorf("backendsStale = %v, want %v", got, tt.stale)
			}
		})
	}
}

// As upstream's nodesSufficientlyEqual: names and providerIDs.
func TestFingerprint(t *testing.T) {
	mk := func(name, id, ip string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Spec.ProviderID = id
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return n
	}
	a := []*corev1.Node{mk("a", "sim://a", "198.18.0.1"), mk("b", "sim://b", "198.18.0.2")}
	if fingerprint(a) != fingerprint([]*corev1.Node{mk("a", "sim://a", "198.18.0.9"), mk("b", "sim://b", "198.18.0.2")}) {
		t.Error("an address change alone changed the backend set")
	}
	if fingerprint(a) == fingerprint([]*corev1.Node{mk("a", "sim://x", "198.18.0.1"), mk("b", "sim://b", "198.18.0.2")}) {
		t.Error("a providerID change did not change the backend set")
	}
	if fingerprint(a) == fingerprint(a[:1]) {
		t.Error("a node leaving did not change the backend set")
	}
}

func TestNodeNames(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 25 {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%02d", i)}})
	}
	got := nodeNames(nodes)
	if len(got) != 21 || got[19] != "n19" || got[20] != "<5 more>" {
		t.Errorf("nodeNames = %v", got)
	}
	if got := nodeNames(nodes[:2]); len(got) != 2 {
		t.Errorf("nodeNames of 2 = %v", got)
	}
}

// TestBackendListSharesTheCachesNodes: the backend list is the lister's
// own nodes (the cache's), sorted and filtered, never copies; it is listed
// again only after invalidate.
func TestBackendListSharesTheCachesNodes(t *testing.T) {
	cached := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{corev1.LabelNodeExcludeBalancers: "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
	}
	lists := 0
	b := newBackendList(func(context.Context) ([]*corev1.Node, error) {
		lists++
		return cached, nil
	}, platform.Set{})
	got, fp, err := b.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []*corev1.Node{cached[1], cached[3], cached[0]}
	if len(got) != len(want) {
		t.Fatalf("backends %v, want a, b, c", nodeNames(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("backend %d is %p (%s), want the cache's own %p (%s)", i, got[i], got[i].Name, want[i], want[i].Name)
		}
	}
	if again, fp2, _ := b.get(context.Background()); lists != 1 || fp2 != fp || len(again) != len(got) {
		t.Errorf("a second get listed again (%d lists) or changed the set", lists)
	}
	b.invalidate()
	if _, _, err := b.get(context.Background()); err != nil || lists != 2 {
		t.Errorf("after invalidate: %d lists (%v), want 2", lists, err)
	}
}
