package nodelifecycle

import (
	"context"

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
	Skip:           descriptor.NeedsInstances,
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
