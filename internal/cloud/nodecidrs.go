package cloud

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// NodeCIDRs returns the provider's provider.NodeCIDRSource behind the layer, or false.
func (l *Layer) NodeCIDRs() (provider.NodeCIDRSource, bool) {
	src, ok := l.provider.(provider.NodeCIDRSource)
	if !ok {
		return nil, false
	}
	return nodeCIDRs{l, src}, true
}

type nodeCIDRs struct {
	layer *Layer
	src   provider.NodeCIDRSource
}

func (n nodeCIDRs) NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error) {
	return do(ctx, n.layer, call{"NodeCIDRs", FamilyNodeCIDRs, "nodecidrs/" + node.Name}, func(ctx context.Context) ([]string, error) {
		return n.src.NodeCIDRs(ctx, node)
	})
}
