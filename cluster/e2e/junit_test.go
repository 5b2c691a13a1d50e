package e2e

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestJUnitSummaryRoundTrip(t *testing.T) {
	run := Run{
		Name: "fast", Kubernetes: "v1.37.2", Commit: "0123abc", Command: "make e2e-fast",
		Started: time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC), Elapsed: 312400 * time.Millisecond,
		Results: []Result{
			{Name: "[sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow]", Status: "passed", Time: 2100 * time.Millisecond},
			{Name: "b <&> \"q\"", Status: "failed", Reason: "service is not reachable (test/e2e/network/loadbalancer.go:156)", Time: time.Minute},
			{Name: "c", Status: "skipped", Reason: "Only supported for providers [aws gce]"},
		},
	}
	var b bytes.Buffer
	if err := WriteJUnit(&b, run); err != nil {
		t.Fatal(err)
	}
	x := b.String()
	for _, want := range []string{
		`<testsuites name="Kubernetes e2e suite v1.37.2, fast" tests="3" failures="1" skipped="1" time="312.400">`,
		`timestamp="2026-11-25T17:00:00Z"`,
		`<property name="outrigger-commit" value="0123abc"></property>`,
		`<failure message="service is not reachable (test/e2e/network/loadbalancer.go:156)"></failure>`,
	} {
		if !strings.Contains(x, want) {
			t.Errorf("summary lacks %s:\n%s", want, x)
		}
	}
	got, err := ReadJUnit(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, run) {
		t.Errorf("ReadJUnit(WriteJUnit(run)):\n got %+v\nwant %+v", got, run)
	}
	if _, err := ReadJUnit(strings.NewReader("<testsuites></testsuites>")); err == nil {
		t.Error("ReadJUnit of a summary with no suite: no error")
	}
}
