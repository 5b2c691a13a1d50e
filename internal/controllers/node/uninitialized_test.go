package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/platform"
	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// The gauges count the tainted nodes of the controller's platforms, and the
// oldest one's age, from what the cache holds at the scrape.
func TestUninitializedNodesGauges(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	mk := func(name, providerID string, age time.Duration, tainted bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))}}
		n.Spec.ProviderID = providerID
		if tainted {
			n.Spec.Taints = []corev1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	nodes := []*corev1.Node{
		mk("new", "", 30*time.Second, true),            // no providerID yet: still this controller's to decide
		mk("stuck", "sim://i-1", 20*time.Minute, true), // its own
		mk("done", "sim://i-2", time.Hour, false),      // initialized
		mk("foreign", "aws:///x", 2*time.Hour, true),   // another platform's
	}
	sim, _ := platform.Parse([]string{"sim"})
	u := &uninitialized{sources: map[*refresher]uninitializedSource{}, now: func() time.Time { return now }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u.add(ctx, &refresher{}, uninitializedSource{controller: "cloud-node-controller", platforms: sim,
		nodes: func(context.Context) ([]*corev1.Node, error) { return nodes, nil }})
	want := `
# HELP outrigger_node_uninitialized_oldest_seconds Age of the oldest node of the controller's platforms that still carries the uninitialized taint (0: none), reported by the leader.
# TYPE outrigger_node_uninitialized_oldest_seconds gauge
outrigger_node_uninitialized_oldest_seconds{controller="cloud-node-controller",tenant=""} 1200
# HELP outrigger_nodes_uninitialized Nodes of the controller's platforms that still carry the node.cloudprovider.kubernetes.io/uninitialized taint, reported by the leader.
# TYPE outrigger_nodes_uninitialized gauge
outrigger_nodes_uninitialized{controller="cloud-node-controller",tenant=""} 2
`
	if err := testutil.CollectAndCompare(u, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// Node controllers of one name in one process are summed by tenant: those
// of one tenant (tests, a tenant restarting) into one series, which the
// registry accepts where it refuses two series of the same labels; those of
// two tenants (tenant mode) each into its own. A tenant's series goes when
// its controller stops.
func TestUninitializedNodesSummedByTenant(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tainted := func(age time.Duration) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: cloudproviderapi.TaintExternalCloudProvider, Effect: corev1.TaintEffectNoSchedule}}}}
	}
	u := &uninitialized{sources: map[*refresher]uninitializedSource{}, now: func() time.Time { return now }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, nodes := range [][]*corev1.Node{{tainted(time.Minute)}, {tainted(time.Second), tainted(time.Hour)}} {
		u.add(ctx, &refresher{}, uninitializedSource{tenant: "shop", controller: "cloud-node-controller",
			nodes: func(context.Context) ([]*corev1.Node, error) { return nodes, nil }})
	}
	blogCtx, stopBlog := context.WithCancel(ctx)
	u.add(blogCtx, &refresher{}, uninitializedSource{tenant: "blog", controller: "cloud-node-controller",
		nodes: func(context.Context) ([]*corev1.Node, error) { return []*corev1.Node{tainted(time.Minute)}, nil }})
	want := `
# HELP outrigger_nodes_uninitialized Nodes of the controller's platforms that still carry the node.cloudprovider.kubernetes.io/uninitialized taint, reported by the leader.
# TYPE outrigger_nodes_uninitialized gauge
outrigger_nodes_uninitialized{controller="cloud-node-controller",tenant="blog"} 1
outrigger_nodes_uninitialized{controller="cloud-node-controller",tenant="shop"} 3
`
	if err := testutil.CollectAndCompare(u, strings.NewReader(want), "outrigger_nodes_uninitialized"); err != nil {
		t.Error(err)
	}

	stopBlog()
	want = `
# HELP outrigger_nodes_uninitialized Nodes of the controller's platforms that still carry the node.cloudprovider.kubernetes.io/uninitialized taint, reported by the leader.
# TYPE outrigger_nodes_uninitialized gauge
outrigger_nodes_uninitialized{controller="cloud-node-controller",tenant="shop"} 3
`
	poll.Until(t, 10*time.Second, "the stopped tenant's series gone", func() bool {
		return testutil.CollectAndCompare(u, strings.NewReader(want), "outrigger_nodes_uninitialized") == nil
	})
}
