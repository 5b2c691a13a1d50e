package nodeipam

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
)

// Descriptor is the node IPAM controller as the manager lists it. Node
// IPAM is the cluster's, whichever provider a node has: it runs once, with
// the first provider's NodeCIDRSource.
var Descriptor = descriptor.Descriptor{
	Name:             Name,
	Migrates:         true,
	MigrationAliases: []string{"nodeipam", "node-ipam"},
	ServiceAccount:   "node-controller",
	OnePerCluster:    true,
	Skip: func(_ context.Context, _ manager.Manager, _ descriptor.Provider, cfg *descriptor.Config) string {
		if !cfg.AllocateNodeCIDRs {
			return "--allocate-node-cidrs is false"
		}
		return ""
	},
	Build: func(all []descriptor.Provider) descriptor.Setup {
		return func(_ context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
			src, _ := p.Layer.NodeCIDRs()
			return Setup(mgr, Options{
				Type:         cfg.CIDRAllocatorType,
				ClusterCIDRs: cfg.ClusterCIDRs,
				MaskV4:       cfg.NodeCIDRMaskSizeIPv4,
				MaskV6:       cfg.NodeCIDRMaskSizeIPv6,
				Cloud:        src,
				Workers:      cfg.NodeWorkers,
				Platforms:    descriptor.AllPlatforms(all),
			})
		}
	},
}
