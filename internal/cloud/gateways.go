package cloud

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// GatewayLoadBalancer returns the provider's native layer-7 load balancers
// (provider.Gateways) behind the layer, or false. Their calls are of the
// load balancer family: a cloud limits its load balancer API as one.
func (l *Layer) GatewayLoadBalancer() (provider.GatewayLoadBalancer, bool) {
	gws, ok := l.provider.(provider.Gateways)
	if !ok {
		return nil, false
	}
	g, ok := gws.GatewayLoadBalancer()
	if !ok || g == nil {
		return nil, false
	}
	return gatewayLoadBalancer{l, g}, true
}

type gatewayLoadBalancer struct {
	layer *Layer
	g     provider.GatewayLoadBalancer
}

// key serializes a Gateway's calls, apart from its Service's (a Gateway
// and a Service may share a namespace/name).
func gatewayKey(gw *provider.Gateway) string {
	return "gateway/" + gw.Namespace + "/" + gw.Name
}

// GatewayFeatures asks no cloud: the provider knows what it serves.
func (g gatewayLoadBalancer) GatewayFeatures() []string { return g.g.GatewayFeatures() }

func (g gatewayLoadBalancer) EnsureGatewayLoadBalancer(ctx context.Context, clusterName string, gw *provider.Gateway) (*corev1.LoadBalancerStatus, error) {
	return do(ctx, g.layer, call{"EnsureGatewayLoadBalancer", FamilyLoadBalancers, gatewayKey(gw)}, func(ctx context.Context) (*corev1.LoadBalancerStatus, error) {
		return g.g.EnsureGatewayLoadBalancer(ctx, clusterName, gw)
	})
}

func (g gatewayLoadBalancer) EnsureGatewayLoadBalancerDeleted(ctx context.Context, clusterName string, gw *provider.Gateway) error {
	_, err := do(ctx, g.layer, call{"EnsureGatewayLoadBalancerDeleted", FamilyLoadBalancers, gatewayKey(gw)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.g.EnsureGatewayLoadBalancerDeleted(ctx, clusterName, gw)
	})
	return err
}
