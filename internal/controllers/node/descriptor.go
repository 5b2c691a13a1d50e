package node

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
)

// Descriptor is the node controller as the manager lists it.
var Descriptor = descriptor.Descriptor{
	Name:           Name,
	Aliases:        []string{"cloud-node"},
	Migrates:       true,
	ServiceAccount: "node-controller",
	Upstream:       true,
	Skip:           descriptor.NeedsInstances,
	Build: func(all []descriptor.Provider) descriptor.Setup {
		// The providers' node controllers meet to tell whose a node is;
		// one provider alone needs no meeting point.
		var siblings *Siblings
		if len(all) > 1 {
			names := make([]string, len(all))
			for i, p := range all {
				names[i] = p.Name
			}
			siblings = NewSiblings(descriptor.AllPlatforms(all), names)
		}
		return func(_ context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
			instances, _ := p.Layer.Instances()
			return Setup(mgr, Options{
				Instances:      instances,
				Workers:        cfg.NodeWorkers,
				RefreshPeriod:  cfg.NodeStatusUpdateFrequency,
				Platforms:      p.Platforms,
				ProviderIDWait: cfg.ProviderIDWait,
				Provider:       p.Tag,
				Siblings:       siblings,
				Tenant:         cfg.Tenant,
			})
		}
	},
}
