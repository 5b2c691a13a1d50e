//go:build integration

package route_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// hangingTable is a route table whose creates for the nodes its Hang
// selects never return.
type hangingTable struct {
	hang *providertest.Hang

	mu     sync.Mutex
	routes []*cloudprovider.Route
}

func (h *hangingTable) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*cloudprovider.Route, len(h.routes))
	for i, r := range h.routes {
		c := *r
		out[i] = &c
	}
	return out, nil
}

func (h *hangingTable) CreateRoute(_ context.Context, _, _ string, r *cloudprovider.Route) error {
	if h.hang.Wait(string(r.TargetNode)) {
		return fmt.Errorf("route to %s: the cloud never answered", r.TargetNode)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := *r
	c.Name = "r-" + r.DestinationCIDR
	h.routes = append(h.routes, &c)
	return nil
}

func (h *hangingTable) DeleteRoute(_ context.Context, _ string, r *cloudprovider.Route) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes = slices.DeleteFunc(h.routes, func(x *cloudprovider.Route) bool { return x.DestinationCIDR == r.DestinationCIDR })
	return nil
}

func (h *hangingTable) targets() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for _, r := range h.routes {
		out[string(r.TargetNode)] = true
	}
	return out
}

// hangingCloud is upstream's fake cloud with the hanging route table.
type hangingCloud struct {
	*fake.Cloud
	table *hangingTable
}

func (c hangingCloud) Routes() (cloudprovider.Routes, bool) { return c.table, true }

// A provider hung on the routes of some nodes costs only those nodes: more
// of them than the route family runs at once, and the nodes that get pod
// CIDRs after them are routed all the same. Each hung node hears of its
// create's timeout (an Event), whether its pass waited for the call (a
// timeout below the least straggle time) or left it running.
func TestHungRoutesCostOnlyTheirNodes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cidrs   netip.Prefix // each subtest's nodes get /24s of their own
	}{
		{"timed out while waited for", 100 * time.Millisecond, netip.MustParsePrefix("198.18.128.0/18")},
		{"left running, then timed out", time.Second, netip.MustParsePrefix("198.18.192.0/18")},
	} {
		t.Run(tc.name, func(t *testing.T) { hungRoutes(t, tc.timeout, tc.cidrs) })
	}
}

func hungRoutes(t *testing.T, timeout time.Duration, clusterCIDR netip.Prefix) {
	prefix := testenv.Name("hang")
	table := &hangingTable{hang: providertest.NewHang(t, providertest.Prefix(prefix))}
	layer := cloud.New(hangingCloud{Cloud: &fake.Cloud{}, table: table}, cloud.Options{Timeout: timeout})
	routes, ok := layer.Routes()
	if !ok {
		t.Fatal("no routes behind the layer")
	}
	testenv.RunController(t, func(mgr manager.Manager) error {
		return route.Setup(mgr, route.Options{
			Routes: routes, ClusterName: "kubernetes", Period: 500 * time.Millisecond,
			ClusterCIDRs: []netip.Prefix{clusterCIDR},
		})
	})

	// Each node gets a /24 of its own from the cluster CIDR.
	cidr := 0
	join := func(name string) {
		c := fmt.Sprintf("198.18.%d.0/24", int(clusterCIDR.Addr().As4()[2])+cidr)
		cidr++
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			n.Spec.Taints = nil
			n.Spec.PodCIDR, n.Spec.PodCIDRs = c, []string{c}
		})
	}
	const hung = cloud.DegradedAbandoned + 4 // more than the family runs at once, and degraded
	for i := range hung {
		join(fmt.Sprintf("%s-%d", prefix, i))
	}
	testenv.Eventually(t, 30*time.Second, "every hung route's call abandoned", func() (bool, error) {
		return layer.Degraded()[cloud.FamilyRoutes] >= hung, nil
	})

	var others []string
	for range 10 {
		name := testenv.Name("ok")
		others = append(others, name)
		join(name)
	}
	testenv.Eventually(t, 30*time.Second, "a route and NetworkUnavailable=False for every other node", func() (bool, error) {
		routed := table.targets()
		for _, n := range others {
			c := networkCondition(t, n)
			if !routed[n] || c == nil || c.Status != corev1.ConditionFalse {
				return false, nil
			}
		}
		return true, nil
	})
	for i := range hung {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if c := networkCondition(t, name); c == nil || c.Status != corev1.ConditionTrue {
			t.Errorf("hung node %s: NetworkUnavailable %+v, want True", name, c)
		}
		// Events are written after the abandoned call, through the event
		// queue: wait for this one.
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("hung node %s's %s Event", name, route.ReasonFailedToCreateRoute), func() (bool, error) {
			return len(testenv.Events(t, name)[route.ReasonFailedToCreateRoute]) > 0, nil
		})
	}
}
