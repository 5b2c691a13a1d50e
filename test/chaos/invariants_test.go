//go:build integration

package chaos

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The checks must catch what they claim to: with no Outrigger running and
// the cloud and cluster broken by hand, every invariant reports.
func TestInvariantsCatchBreakage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &harness{cfg: Config{Nodes: 2, Services: 1, Log: io.Discard}, dir: t.TempDir(), created: map[string]time.Time{}, closing: make(chan struct{})}
	h.report = newReport(h.cfg, Schedule{})
	if err := h.setUp(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.tearDown()
	watch, err := h.watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); watch.Wait() }()
	// Nodes as their kubelets register them; nobody initializes them.
	for _, name := range []string{"chaos-node-1", "chaos-node-2"} {
		if err := kubeletsim.Register(ctx, h.client, name); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := h.client.CoreV1().Services(namespace).Get(ctx, "svc-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A load balancer for svc-1 with the wrong listeners, a second one for
	// it, and one for no Service.
	for _, lb := range []struct{ name, owner string }{
		{cloudprovider.DefaultLoadBalancerName(svc), "chaos/svc-1"}, {"a-duplicate", "chaos/svc-1"}, {"a-leaked", "chaos/gone"},
	} {
		spec := simcloud.LoadBalancerSpec{Tags: map[string]string{"service": lb.owner}, Listeners: []simcloud.Listener{{Protocol: "TCP", Port: 1, NodePort: 30001}}}
		if _, err := h.cloud.PutLoadBalancer(lb.name, spec, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.cloud.CreateRoute(simcloud.Route{Name: "r-ghost", Destination: "198.18.99.0/24", Target: "ghost"}); err != nil {
		t.Fatal(err)
	}
	// A Service whose deletion a finalizer holds up.
	held := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: namespace, Finalizers: []string{"example.com/hold"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := h.client.CoreV1().Services(namespace).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CoreV1().Services(namespace).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Node whose instance was never there, and a Node deleted while its
	// instance runs.
	if err := kubeletsim.Register(ctx, h.client, "no-instance"); err != nil {
		t.Fatal(err)
	}
	// Two Nodes with one pod CIDR.
	for _, name := range []string{"chaos-node-1", "no-instance"} {
		patch := []byte(`{"spec":{"podCIDR":"198.18.200.0/24","podCIDRs":["198.18.200.0/24"]}}`)
		if _, err := h.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.client.CoreV1().Nodes().Delete(ctx, "chaos-node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	want := []string{OrphanLB, NoIngress, DuplicateLB, StaleListeners, OrphanRoute, MissingRoute, NodeDeletedInstance, FinalizerLeft, NodeNotInitialized, NodeWithoutInstance, DuplicatePodCIDR}
	var got map[string]bool
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := h.settled(ctx)
		if err != nil {
			return false, nil
		}
		got = map[string]bool{}
		for _, x := range v {
			got[x.Invariant] = true
		}
		// The deletion is seen by the watch.
		if h.report.count(NodeDeletedInstance) > 0 {
			got[NodeDeletedInstance] = true
		}
		return len(got) == len(want), nil
	})
	for _, inv := range want {
		if !got[inv] {
			t.Errorf("%s was not reported", inv)
		}
	}
	if !slices.Equal(Invariants, want) {
		t.Errorf("this test covers %v; the harness checks %v", want, Invariants)
	}
	if err != nil {
		t.Logf("reported: %v", got)
	}
}
