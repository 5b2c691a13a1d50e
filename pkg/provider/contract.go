package provider

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// BatchInstances is an optional interface for a provider's InstancesV2
// value: it answers for many nodes in one cloud API call. Outrigger uses it
// for initialization, the periodic address refresh and the lifecycle check,
// so a cluster of thousands of nodes costs a handful of cloud calls per
// period rather than one per node. A provider that does not implement it is
// called node by node through InstancesV2.
type BatchInstances interface {
	// InstancesStatus returns one status per node, in the order given. An
	// error for the whole call (throttling, an outage) is returned as err;
	// a problem with one node only is that node's InstanceStatus.Err.
	// Outrigger never passes more than MaxBatch nodes.
	InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]InstanceStatus, error)
}

// MaxBatch is the most nodes Outrigger hands a provider in one
// InstancesStatus call.
const MaxBatch = 500

// InstanceStatus is what the cloud knows of one node's instance.
type InstanceStatus struct {
	// Exists is false only when the cloud positively reports the instance
	// gone (terminated or unknown). Never false because of an error.
	Exists bool
	// Shutdown is true when the instance exists but is stopped.
	Shutdown bool
	// Metadata is set when Exists (and the lookup asked for metadata).
	Metadata *cloudprovider.InstanceMetadata
	// Err is set when the cloud could not tell for this node.
	Err error
}

// NodeCIDRSource is an optional interface for a provider (the
// cloudprovider.Interface value itself): the cloud decides each node's pod
// CIDRs, as clouds with native pod networking (alias IP ranges, prefix
// delegation) do. It backs --cidr-allocator-type=CloudAllocator.
type NodeCIDRSource interface {
	// NodeCIDRs returns the pod CIDRs the cloud assigned to the node's
	// instance, at most one IPv4 and one IPv6, assigning them first if
	// needed. Calling it again for the same instance returns the same CIDRs.
	NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error)
}
