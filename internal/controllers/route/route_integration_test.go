//go:build integration

package route_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func routeFlags(clusterCIDR string, extra ...string) []string {
	return append([]string{"--allocate-node-cidrs", "--cluster-cidr=" + clusterCIDR, "--route-reconciliation-period=500ms"}, extra...)
}

// joinNodes creates instances and their nodes.
func joinNodes(t *testing.T, cloud *testenv.Cloud, prefix string, n int) []string {
	t.Helper()
	var names []string
	for range n {
		name := testenv.Name(prefix)
		if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, name, nil)
		names = append(names, name)
	}
	return names
}

// routesByTarget maps node name to its routes' destinations.
func routesByTarget(cloud *testenv.Cloud) map[string][]string {
	out := map[string][]string{}
	for _, r := range cloud.Routes() {
		out[r.Target] = append(out[r.Target], r.Destination)
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func networkCondition(t *testing.T, name string) *corev1.NodeCondition {
	for _, c := range testenv.GetNode(t, name).Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return &c
		}
	}
	return nil
}

func waitRouted(t *testing.T, cloud *testenv.Cloud, names []string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "routes and NetworkUnavailable=False on every node", func() (bool, error) {
		routes := routesByTarget(cloud)
		for _, n := range names {
			node := testenv.GetNode(t, n)
			if len(node.Spec.PodCIDRs) == 0 || fmt.Sprint(sorted(routes[n])) != fmt.Sprint(sorted(node.Spec.PodCIDRs)) {
				return false, nil
			}
			c := networkCondition(t, n)
			if c == nil || c.Status != corev1.ConditionFalse || c.Reason != route.ConditionReasonCreated {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestRoutesFollowNodes(t *testing.T) {
	cloud := testenv.StartCloud(t)
	// A route of this cluster's outside the cluster CIDR (someone else's
	// job: upstream's rule keeps it), a stale one of ours, and a stale one
	// with this cluster's name but no identity (made before identities, or
	// by another cluster left at the same name: kept).
	kubeSystem, err := testenv.Client.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]string{"cluster": "kubernetes", "cluster-id": string(kubeSystem.UID)}
	foreign := simcloud.Route{Name: "kubernetes-vpn", Destination: "198.19.96.0/24", Target: "gateway", Tags: ours}
	stale := simcloud.Route{Name: "kubernetes-gone-1", Destination: "198.18.99.0/24", Target: "gone", Tags: ours}
	nameOnly := simcloud.Route{Name: "kubernetes-elsewhere-1", Destination: "198.18.98.0/24", Target: "elsewhere", Tags: map[string]string{"cluster": "kubernetes"}}
	for _, r := range []simcloud.Route{foreign, stale, nameOnly} {
		if _, err := cloud.CreateRoute(r); err != nil {
			t.Fatal(err)
		}
	}
	names := joinNodes(t, cloud, "rt", 3)
	testenv.StartOutrigger(t, cloud, routeFlags("198.18.0.0/17,fd00:110::/56")...)
	waitRouted(t, cloud, names)
	for _, n := range names {
		if got := routesByTarget(cloud)[n]; len(got) != 2 {
			t.Errorf("dual-stack node %s has routes %v, want one per family", n, got)
		}
	}
	testenv.Eventually(t, 10*time.Second, "stale route deleted", func() (bool, error) {
		return len(routesByTarget(cloud)["gone"]) == 0, nil
	})
	if len(routesByTarget(cloud)["elsewhere"]) != 1 {
		t.Error("a route carrying this cluster's name but no identity was deleted")
	}

	// A node leaving takes its routes with it; a terminated instance's
	// routes (blackholes) go too.
	if err := testenv.Client.CoreV1().Nodes().Delete(context.Background(), names[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	in, _ := cloud.Get(names[1])
	if _, err := cloud.SetState(in.ID, simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	testenv.SetReady(t, names[1], false) // so the lifecycle controller deletes it
	testenv.Eventually(t, 20*time.Second, "routes of the deleted node and of the terminated instance gone", func() (bool, error) {
		r := routesByTarget(cloud)
		return len(r[names[0]]) == 0 && len(r[names[1]]) == 0 && len(r[names[2]]) == 2, nil
	})
	if got := routesByTarget(cloud)["gateway"]; len(got) != 1 {
		t.Errorf("the route outside the cluster CIDR was touched: %v", cloud.Routes())
	}
}

func TestRouteQuotaReachesTheNode(t *testing.T) {
	cloud := testenv.StartCloud(t)
	cloud.SetSettings(simcloud.Settings{MaxRoutes: 2})
	names := joinNodes(t, cloud, "quota", 3)
	testenv.StartOutrigger(t, cloud, routeFlags("198.18.0.0/17")...)
	var unrouted string
	testenv.Eventually(t, 30*time.Second, "a FailedToCreateRoute event and NetworkUnavailable=True", func() (bool, error) {
		for _, n := range names {
			c := networkCondition(t, n)
			if len(testenv.Events(t, n)[route.ReasonFailedToCreateRoute]) > 0 && c != nil && c.Status == corev1.ConditionTrue {
				unrouted = n
				return true, nil
			}
		}
		return false, nil
	})
	ev := testenv.Events(t, unrouted)[route.ReasonFailedToCreateRoute][0]
	t.Logf("event: %s", ev.Message)
	// As upstream writes it.
	if ev.Source.Component != "route_controller" || ev.Type != corev1.EventTypeWarning || ev.InvolvedObject.ResourceVersion != "" {
		t.Errorf("event from %q, type %s, about %+v", ev.Source.Component, ev.Type, ev.InvolvedObject)
	}
	cloud.SetSettings(simcloud.Settings{})
	waitRouted(t, cloud, names)
}

func TestRoutesDespiteCloudFaultsWithoutStorms(t *testing.T) {
	tests := []struct {
		name     string
		settings simcloud.Settings
		heal     time.Duration
	}{
		{name: "throttled", settings: simcloud.Settings{RateLimit: 5, RateBurst: 2}},
		{name: "hanging", settings: simcloud.Settings{Hang: true}, heal: 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cloud := testenv.StartCloud(t)
			names := joinNodes(t, cloud, "fault", 5)
			cloud.SetSettings(tc.settings)
			if tc.heal > 0 {
				time.AfterFunc(tc.heal, func() { cloud.SetSettings(simcloud.Settings{}) })
			}
			testenv.StartOutrigger(t, cloud, routeFlags("198.18.0.0/17", "--cloud-call-timeout=1s")...)
			waitRouted(t, cloud, names)
			calls := cloud.Calls().ByOp
			// Five routes: a create that timed out or was throttled may be
			// repeated, but never a storm. The adaptive rate starts at
			// 100/s and at most halves per throttle episode, so reaching
			// this cloud's 5/s takes about four episodes: up to five
			// tries per route.
			if calls["CreateRoute"] > 25 {
				t.Errorf("%d CreateRoute calls for 5 routes", calls["CreateRoute"])
			}
			// Steady state: passes only list. Two more passes:
			before := cloud.Calls().ByOp
			var after map[string]int64
			testenv.Eventually(t, 30*time.Second, "two more route passes", func() (bool, error) {
				after = cloud.Calls().ByOp
				return after["ListRoutes"] >= before["ListRoutes"]+2, nil
			})
			if after["CreateRoute"] != before["CreateRoute"] || after["DeleteRoute"] != before["DeleteRoute"] {
				t.Errorf("route writes with nothing to do: %v -> %v", before, after)
			}
		})
	}
}

// TestRoutesWithoutAllocateNodeCIDRs runs the route controller as upstream's
// runs: --configure-cloud-routes and --cluster-cidr, with node pod CIDRs set
// by another IPAM (kube-controller-manager's here, played by the test).
func TestRoutesWithoutAllocateNodeCIDRs(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("kcm")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "198.18.96.0/24", []string{"198.18.96.0/24"}
	})
	testenv.StartOutrigger(t, cloud, "--cluster-cidr=198.18.96.0/20", "--route-reconciliation-period=500ms")
	waitRouted(t, cloud, []string{name})
}
