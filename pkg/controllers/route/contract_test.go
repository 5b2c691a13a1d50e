package route_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/route"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
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
	mgr, err := ctrl.NewManager(testenv.Config, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := route.Setup(mgr, route.Options{
		Routes: routes, ClusterName: "kubernetes", Period: 500 * time.Millisecond,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18"), netip.MustParsePrefix("fd00:64::/56")},
	}); err != nil {
		t.Fatal(err)
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	waitRouted(t, sim, names)
}
