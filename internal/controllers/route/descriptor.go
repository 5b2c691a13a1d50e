package route

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
)

// Descriptor is the route controller as the manager lists it.
var Descriptor = descriptor.Descriptor{
	Name:             Name,
	Aliases:          []string{"route"},
	Migrates:         true,
	MigrationAliases: []string{"route-controller"},
	ServiceAccount:   "route-controller",
	Upstream:         true,
	Skip: func(_ context.Context, _ manager.Manager, p descriptor.Provider, cfg *descriptor.Config) string {
		switch _, ok := p.Layer.Routes(); {
		case !cfg.ConfigureCloudRoutes:
			return "--configure-cloud-routes is false"
		case !ok:
			return fmt.Sprintf("--configure-cloud-routes is set, but provider %q has no routes", p.Name)
		case len(cfg.ClusterCIDRs) == 0:
			return "--configure-cloud-routes needs --cluster-cidr"
		}
		return ""
	},
	Build: descriptor.PerProvider(func(_ context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
		routes, _ := p.Layer.Routes()
		return Setup(mgr, Options{
			ServiceCIDRs: mgr.GetAPIReader(),
			Routes:       routes,
			ClusterName:  cfg.ClusterName,
			ClusterCIDRs: cfg.ClusterCIDRs,
			Period:       cfg.RouteReconciliationPeriod,
			Workers:      cfg.NodeWorkers,
			Platforms:    p.Platforms,
			Provider:     p.Tag,
		})
	}),
}
