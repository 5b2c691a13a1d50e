//go:build integration

package route_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestRoutesFromAnotherIPAM runs the route controller alone, as Outrigger
// does with --configure-cloud-routes and --cluster-cidr but without
// --allocate-node-cidrs: pod CIDRs come from someone else
// (kube-controller-manager's IPAM, here the test).
func TestRoutesFromAnotherIPAM(t *testing.T) {
	sim := testenv.StartCloud(t)
	provider, err := testenv.Registry().New("sim", strings.NewReader("endpoint: "+sim.URL+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	routes, ok := cloud.New(provider, cloud.Options{}).Routes()
	if !ok {
		t.Fatal("the sim has no routes")
	}
	var names []string
	for _, cidrs := range [][]string{{"198.18.64.0/24", "fd00:64::/64"}, {"198.18.65.0/24", "fd00:64:0:1::/64"}} {
		name := testenv.Name("ipam")
		if _, err := sim.Create(simcloud.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			n.Spec.Taints = nil
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
		})
		names = append(names, name)
	}
	testenv.RunController(t, func(mgr manager.Manager) error {
		return route.Setup(mgr, route.Options{
			Routes: routes, ClusterName: "kubernetes", Period: 500 * time.Millisecond,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18"), netip.MustParsePrefix("fd00:64::/56")},
		})
	})
	waitRouted(t, sim, names)
}
