package cloud

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

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

// NodeCIDRs returns the provider's NodeCIDRSource behind the layer, or false.
func (l *Layer) NodeCIDRs() (NodeCIDRSource, bool) {
	src, ok := l.provider.(NodeCIDRSource)
	if !ok {
		return nil, false
	}
	return nodeCIDRs{l, src}, true
}

type nodeCIDRs struct {
	layer *Layer
	src   NodeCIDRSource
}

func (n nodeCIDRs) NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error) {
	return do(ctx, n.layer, call{"NodeCIDRs", FamilyNodeCIDRs, "nodecidrs/" + node.Name}, func(ctx context.Context) ([]string, error) {
		return n.src.NodeCIDRs(ctx, node)
	})
}
