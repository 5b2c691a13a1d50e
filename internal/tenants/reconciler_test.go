package tenants

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// fakeRun is a runner in a given state, with nothing running behind it.
func fakeRun(name, cluster string, running bool) *runner {
	done := make(chan struct{})
	close(done)
	return &runner{tenant: Tenant{Name: name}, cancel: func() {}, done: done, cluster: cluster, running: running}
}

func newTestReconciler(t *testing.T) *Reconciler {
	t.Helper()
	r, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Identity: "self",
		Start: func(context.Context, Tenant, *rest.Config, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return t0 }
	return r
}

// Two tenants of one cluster on this replica: the first to take it serves
// it, the second is refused; when the lower name waits for a cluster a
// higher name serves, the higher is stopped and refused from then on.
func TestTakeAndPreempt(t *testing.T) {
	r := newTestReconciler(t)
	if other := r.take("uid-1", "b"); other != "" {
		t.Fatalf("first take refused for %s", other)
	}
	r.runners["b"] = fakeRun("b", "uid-1", true)
	if other := r.take("uid-1", "c"); other != "b" {
		t.Errorf("second tenant of uid-1 refused for %q, want b", other)
	}
	r.runners["a"] = fakeRun("a", "uid-1", false) // connected, refused, waiting
	r.preempt(context.Background())
	if r.runners["b"] != nil {
		t.Error("b still runs while a, of a lower name, waits for its cluster")
	}
	r.release("uid-1", "b")
	if other := r.take("uid-1", "b"); other != "a" {
		t.Errorf("b restarted and refused for %q, want a", other)
	}
	if other := r.take("uid-1", "a"); other != "" {
		t.Errorf("a refused for %s", other)
	}
}

// A live Lease of another replica serving the cluster refuses it; this
// replica's own Lease (what it served last round) and an expired one do not.
func TestTakeReadsOtherReplicasLeases(t *testing.T) {
	r := newTestReconciler(t)
	r.claims = map[string]Claim{
		"x": withCluster(held("other", 0), "uid-1"),
		"y": withCluster(held("self", 0), "uid-2"),
		"z": withCluster(held("other", time.Minute), "uid-3"),
	}
	if other := r.take("uid-1", "w"); other != "x" {
		t.Errorf("refused for %q, want x", other)
	}
	if other := r.take("uid-2", "w"); other != "" {
		t.Errorf("own Lease refused it for %s", other)
	}
	if other := r.take("uid-3", "w"); other != "" {
		t.Errorf("an expired Lease refused it for %s", other)
	}
}
