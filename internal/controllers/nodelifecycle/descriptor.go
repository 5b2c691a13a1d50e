package nodelifecycle

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
)

// Descriptor is the node lifecycle controller as the manager lists it.
var Descriptor = descriptor.Descriptor{
	Name:           Name,
	Aliases:        []string{"cloud-node-lifecycle"},
	Migrates:       true,
	ServiceAccount: "node-controller",
	Upstream:       true,
	Skip: func(_ context.Context, _ manager.Manager, p descriptor.Provider, _ *descriptor.Config) string {
		if _, ok := p.Layer.Instances(); !ok {
			return fmt.Sprintf("provider %q supports neither InstancesV2 nor Instances", p.Name)
		}
		return ""
	},
	Build: descriptor.PerProvider(func(_ context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
		instances, _ := p.Layer.Instances()
		return Setup(mgr, Options{
			Instances:     instances,
			MonitorPeriod: cfg.NodeMonitorPeriod,
			Workers:       cfg.LifecycleWorkers,
			Platforms:     p.Platforms,
			Provider:      p.Tag,
		})
	}),
}
