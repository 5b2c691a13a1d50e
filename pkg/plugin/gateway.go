package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// GatewayLoadBalancer implements provider.Gateways: the plugin's cloud
// serves Gateways when it offers GATEWAY_LOAD_BALANCER.
func (c *Client) GatewayLoadBalancer() (provider.GatewayLoadBalancer, bool) {
	if !c.caps[pluginpb.Capability_GATEWAY_LOAD_BALANCER] {
		return nil, false
	}
	return gatewayLoadBalancer{c}, true
}

type gatewayLoadBalancer struct{ c *Client }

func (g gatewayLoadBalancer) GatewayFeatures() []string { return g.c.gatewayFeatures }

func (g gatewayLoadBalancer) EnsureGatewayLoadBalancer(ctx context.Context, clusterName string, gw *provider.Gateway) (*corev1.LoadBalancerStatus, error) {
	b, err := encode(gw)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, "EnsureGatewayLoadBalancer", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.EnsureLoadBalancerResponse, error) {
		return g.c.rpc.EnsureGatewayLoadBalancer(ctx, &pluginpb.GatewayLoadBalancerRequest{ClusterName: clusterName, Gateway: b}, opts...)
	})
	if err != nil {
		return nil, err
	}
	return decodeStatus(resp.GetStatus())
}

func (g gatewayLoadBalancer) EnsureGatewayLoadBalancerDeleted(ctx context.Context, clusterName string, gw *provider.Gateway) error {
	b, err := encode(gw)
	if err != nil {
		return err
	}
	_, err = call(ctx, "EnsureGatewayLoadBalancerDeleted", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.EnsureLoadBalancerDeletedResponse, error) {
		return g.c.rpc.EnsureGatewayLoadBalancerDeleted(ctx, &pluginpb.GatewayLoadBalancerRequest{ClusterName: clusterName, Gateway: b}, opts...)
	})
	return err
}

// gateways is the served provider's, when it has them.
func gatewaysOf(p any) provider.GatewayLoadBalancer {
	gws, ok := p.(provider.Gateways)
	if !ok {
		return nil
	}
	g, ok := gws.GatewayLoadBalancer()
	if !ok {
		return nil
	}
	return g
}

func (s *server) gateway(req *pluginpb.GatewayLoadBalancerRequest) (*provider.Gateway, error) {
	if s.gateways == nil {
		return nil, unimplemented("gateway load balancers")
	}
	gw := &provider.Gateway{}
	if err := json.Unmarshal(req.GetGateway(), gw); err != nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("gateway is not a JSON Gateway: %v", err))
	}
	return gw, nil
}

func (s *server) EnsureGatewayLoadBalancer(ctx context.Context, req *pluginpb.GatewayLoadBalancerRequest) (*pluginpb.EnsureLoadBalancerResponse, error) {
	gw, err := s.gateway(req)
	if err != nil {
		return nil, err
	}
	st, err := s.gateways.EnsureGatewayLoadBalancer(ctx, req.GetClusterName(), gw)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	b, err := encode(st)
	return &pluginpb.EnsureLoadBalancerResponse{Status: b}, err
}

func (s *server) EnsureGatewayLoadBalancerDeleted(ctx context.Context, req *pluginpb.GatewayLoadBalancerRequest) (*pluginpb.EnsureLoadBalancerDeletedResponse, error) {
	gw, err := s.gateway(req)
	if err != nil {
		return nil, err
	}
	return &pluginpb.EnsureLoadBalancerDeletedResponse{}, toStatus(ctx, s.gateways.EnsureGatewayLoadBalancerDeleted(ctx, req.GetClusterName(), gw))
}
