// The client side of the instance and route calls.

package plugin

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

type instances struct{ c *Client }

func (i instances) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	b, err := encodeNode(node)
	if err != nil {
		return false, err
	}
	resp, err := call(ctx, "InstanceExists", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.InstanceExistsResponse, error) {
		return i.c.rpc.InstanceExists(ctx, &pluginpb.InstanceRequest{Node: b}, opts...)
	})
	return resp.GetExists(), err
}

func (i instances) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	b, err := encodeNode(node)
	if err != nil {
		return false, err
	}
	resp, err := call(ctx, "InstanceShutdown", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.InstanceShutdownResponse, error) {
		return i.c.rpc.InstanceShutdown(ctx, &pluginpb.InstanceRequest{Node: b}, opts...)
	})
	return resp.GetShutdown(), err
}

func (i instances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	b, err := encodeNode(node)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, "InstanceMetadata", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.InstanceMetadataResponse, error) {
		return i.c.rpc.InstanceMetadata(ctx, &pluginpb.InstanceRequest{Node: b}, opts...)
	})
	if err != nil {
		return nil, err
	}
	return fromMetadata(resp.GetMetadata()), nil
}

type batchInstances struct{ instances }

func (b batchInstances) InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]provider.InstanceStatus, error) {
	encoded, err := encodeNodes(nodes)
	if err != nil {
		return nil, err
	}
	// A batch of nodes with large labels or annotations could pass what a
	// plugin accepts in one message: it goes as several calls, in order.
	out := make([]provider.InstanceStatus, 0, len(nodes))
	for _, part := range splitBySize(encoded, MessageBudget) {
		resp, err := call(ctx, "InstancesStatus", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.InstancesStatusResponse, error) {
			return b.c.rpc.InstancesStatus(ctx, &pluginpb.InstancesStatusRequest{Nodes: part}, opts...)
		})
		if err != nil {
			return nil, err
		}
		if len(resp.GetStatuses()) != len(part) {
			return nil, fmt.Errorf("plugin InstancesStatus: %d statuses for %d nodes", len(resp.GetStatuses()), len(part))
		}
		for _, st := range resp.GetStatuses() {
			s := provider.InstanceStatus{Exists: st.GetExists(), Shutdown: st.GetShutdown(), Metadata: fromMetadata(st.GetMetadata())}
			if st.GetError() != "" {
				s = provider.InstanceStatus{Exists: true, Err: errors.New(st.GetError())}
			}
			out = append(out, s)
		}
	}
	return out, nil
}

type routes struct{ c *Client }

func (r routes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	resp, err := call(ctx, "ListRoutes", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.ListRoutesResponse, error) {
		return r.c.rpc.ListRoutes(ctx, &pluginpb.ListRoutesRequest{ClusterName: clusterName, ClusterId: r.c.id()}, opts...)
	})
	if err != nil {
		return nil, err
	}
	out := make([]*cloudprovider.Route, 0, len(resp.GetRoutes()))
	for _, rt := range resp.GetRoutes() {
		out = append(out, fromRoute(rt))
	}
	return out, nil
}

func (r routes) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	_, err := call(ctx, "CreateRoute", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.CreateRouteResponse, error) {
		return r.c.rpc.CreateRoute(ctx, &pluginpb.CreateRouteRequest{ClusterName: clusterName, ClusterId: r.c.id(), NameHint: nameHint, Route: toRoute(route)}, opts...)
	})
	return err
}

func (r routes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	_, err := call(ctx, "DeleteRoute", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.DeleteRouteResponse, error) {
		return r.c.rpc.DeleteRoute(ctx, &pluginpb.DeleteRouteRequest{ClusterName: clusterName, ClusterId: r.c.id(), Route: toRoute(route)}, opts...)
	})
	return err
}
