package tenants

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/record"

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

const testKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: x}}]
`

// A tenant slow to stop (its controllers wait on a cluster that is down)
// delays no other tenant: the round that stops it returns at once and
// renews the other tenant's Lease, and its own Lease goes only once it
// has stopped.
func TestSlowStopDelaysNoRenewal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	for i, name := range []string{"fast", "slow"} {
		// Two clusters: their API servers' addresses tell them apart.
		kc := strings.Replace(testKubeconfig, "127.0.0.1:1", fmt.Sprintf("127.0.0.1:%d", i+1), 1)
		s := secret(name, map[string]string{KeyKubeconfig: kc})
		s.Namespace, s.Labels = "ns", map[string]string{"tenant": "yes"}
		if _, err := client.CoreV1().Secrets("ns").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unblock := make(chan struct{})
	started := make(chan string, 2)
	r, err := New(Options{Client: client, Namespace: "ns", Selector: labels.SelectorFromSet(labels.Set{"tenant": "yes"}),
		Identity: "self", LeaseDuration: time.Minute, Recorder: record.NewFakeRecorder(100),
		Start: func(ctx context.Context, t Tenant, _ *rest.Config, _ string) error {
			started <- t.Name
			<-ctx.Done()
			if t.Name == "slow" {
				<-unblock // stops only when the test says
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.identify = func(_ context.Context, cfg *rest.Config) (string, error) { return "uid-" + cfg.Host, nil }
	now := t0
	r.now = func() time.Time { return now }
	r.round(ctx)
	for range 2 {
		<-started
	}
	if err := client.CoreV1().Secrets("ns").Delete(ctx, "slow", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	done := make(chan struct{})
	go func() { r.round(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the round waited for the slow tenant to stop")
	}
	fast, err := client.CoordinationV1().Leases("ns").Get(ctx, LeaseName("fast"), metav1.GetOptions{})
	if err != nil || !fast.Spec.RenewTime.Time.Equal(now) {
		t.Errorf("fast's Lease %v (%v), want renewed at %v", fast.Spec.RenewTime, err, now)
	}
	if _, err := client.CoordinationV1().Leases("ns").Get(ctx, LeaseName("slow"), metav1.GetOptions{}); err != nil {
		t.Errorf("slow's Lease deleted before it stopped: %v", err)
	}
	close(unblock)
	r.stops.Wait()
	if _, err := client.CoordinationV1().Leases("ns").Get(ctx, LeaseName("slow"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("slow's Lease after it stopped: %v, want deleted", err)
	}
}

// A Secret added between rounds is acted on at once: with rounds an hour
// apart, the new tenant's Lease is claimed only because the watch said so.
func TestNewSecretStartsARound(t *testing.T) {
	client := fake.NewClientset()
	r, err := New(Options{Client: client, Namespace: "ns", Identity: "self", Selector: labels.SelectorFromSet(labels.Set{"tenant": "true"}),
		Period: time.Hour, LeaseDuration: 15 * time.Second, Recorder: record.NewFakeRecorder(100),
		Start: func(ctx context.Context, _ Tenant, _ *rest.Config, _ string) error { <-ctx.Done(); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	r.identify = func(context.Context, *rest.Config) (string, error) { return "uid-1", nil }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the reconciler ended with %v", err)
		}
	}()
	waitForLease := func(name string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := client.CoordinationV1().Leases("ns").Get(ctx, name, metav1.GetOptions{}); err == nil {
				return
			} else if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no Lease %s: no round after the Secret was added", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The first round has run once this replica's member Lease exists.
	waitForLease(memberLeaseName("self"))
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t1", Labels: map[string]string{"tenant": "true"}},
		Data: map[string][]byte{KeyKubeconfig: []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: c, context: {cluster: c}}]\ncurrent-context: c\n")}}
	if _, err := client.CoreV1().Secrets("ns").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForLease(LeaseName("t1"))
}
