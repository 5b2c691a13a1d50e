package service

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
)

// Descriptor is the service controller as the manager lists it.
var Descriptor = descriptor.Descriptor{
	Name:             Name,
	Aliases:          []string{"service"},
	Migrates:         true,
	MigrationAliases: []string{"service-controller"},
	ServiceAccount:   "service-controller",
	Upstream:         true,
	Skip: func(_ context.Context, _ manager.Manager, p descriptor.Provider, _ *descriptor.Config) string {
		if _, ok := p.Layer.LoadBalancer(); !ok {
			return fmt.Sprintf("provider %q has no load balancers", p.Name)
		}
		return ""
	},
	Build: descriptor.PerProvider(func(_ context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
		// One controller per class: each keeps the finalizers, statuses
		// and ownership records of its own class.
		lb, _ := p.Layer.LoadBalancer()
		for _, class := range p.Classes {
			if err := Setup(mgr, Options{
				LoadBalancer:      lb,
				ClusterName:       cfg.ClusterName,
				Class:             class,
				Workers:           cfg.ServiceWorkers,
				Platforms:         p.Platforms,
				OrphanSweepPeriod: cfg.OrphanSweepPeriod,
				ClusterID:         p.ClusterID,
				Provider:          p.ClassTag(class),
				Tenant:            cfg.Tenant,
			}); err != nil {
				return err
			}
		}
		return nil
	}),
}
