// The client side of the load balancer calls: a Service and its backend
// Nodes sent (streamed once per Node set), ownership records read.

package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

type loadBalancer struct{ c *Client }

func (l loadBalancer) GetLoadBalancerName(ctx context.Context, clusterName string, svc *corev1.Service) string {
	b, err := encodeService(svc)
	if err == nil {
		resp, err := call(ctx, "GetLoadBalancerName", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.GetLoadBalancerNameResponse, error) {
			return l.c.rpc.GetLoadBalancerName(ctx, &pluginpb.LoadBalancerRequest{ClusterName: clusterName, ClusterId: l.c.id(), Service: b}, opts...)
		})
		if err == nil && resp.GetName() != "" {
			return resp.GetName()
		}
	}
	// The interface cannot fail here; upstream's default is what most
	// providers return anyway.
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func decodeStatus(b []byte) (*corev1.LoadBalancerStatus, error) {
	st := &corev1.LoadBalancerStatus{}
	if len(bytes.TrimSpace(b)) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("plugin returned a status that is not a JSON core/v1 LoadBalancerStatus: %w", err)
	}
	return st, nil
}

func (l loadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	b, err := encodeService(svc)
	if err != nil {
		return nil, false, err
	}
	resp, err := call(ctx, "GetLoadBalancer", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.GetLoadBalancerResponse, error) {
		return l.c.rpc.GetLoadBalancer(ctx, &pluginpb.LoadBalancerRequest{ClusterName: clusterName, ClusterId: l.c.id(), Service: b}, opts...)
	})
	if err != nil || !resp.GetExists() {
		return nil, false, err
	}
	st, err := decodeStatus(resp.GetStatus())
	return st, err == nil, err
}

func (l loadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	resp, err := withBackends(ctx, l.c, "EnsureLoadBalancer", clusterName, svc, nodes, l.c.rpc.EnsureLoadBalancerStream, l.c.rpc.EnsureLoadBalancer)
	if err != nil {
		return nil, err
	}
	return decodeStatus(resp.GetStatus())
}

func (l loadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service, nodes []*corev1.Node) error {
	_, err := withBackends(ctx, l.c, "UpdateLoadBalancer", clusterName, svc, nodes, l.c.rpc.UpdateLoadBalancerStream, l.c.rpc.UpdateLoadBalancer)
	return err
}

// withBackends makes an EnsureLoadBalancer or UpdateLoadBalancer call: as a
// stream when the plugin offers LOAD_BALANCER_STREAM, else in one message;
// with NODE_CACHE, the backends by their set's digest when the plugin holds
// the set, else by reference and in full only the Nodes the plugin may not
// hold, sent again if it says it lacks some.
func withBackends[Res any](ctx context.Context, c *Client, method, clusterName string, svc *corev1.Service, nodes []*corev1.Node,
	stream func(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[pluginpb.EnsureLoadBalancerRequest, Res], error),
	unary func(context.Context, *pluginpb.EnsureLoadBalancerRequest, ...grpc.CallOption) (*Res, error)) (*Res, error) {
	b, err := encodeService(svc)
	if err != nil {
		return nil, err
	}
	send := func(ctx context.Context, p *backendPlan, opts ...grpc.CallOption) (*Res, error) {
		if c.caps[pluginpb.Capability_LOAD_BALANCER_STREAM] {
			return sendBackends(ctx, stream, clusterName, c.id(), b, p, opts...)
		}
		req, err := p.message(clusterName, b)
		if err != nil {
			return nil, err
		}
		req.ClusterId = c.id()
		return unary(ctx, req, opts...)
	}
	resp, err := call(ctx, method, func(ctx context.Context, opts ...grpc.CallOption) (*Res, error) {
		if c.nodeCache == nil {
			return send(ctx, &backendPlan{fill: nodes}, opts...)
		}
		for attempt := 0; ; attempt++ {
			p, err := c.nodeCache.plan(ctx, nodes)
			if err != nil {
				return nil, err
			}
			var kept metadata.MD
			resp, err := send(ctx, p, append(opts[:len(opts):len(opts)], grpc.Trailer(&kept))...)
			c.nodeCache.done(p, err == nil || first(kept.Get(MetadataNodeCache)) == NodeCacheKept, err == nil)
			// A plugin that restarted misses the set, then the Nodes.
			miss := cacheMiss(err)
			if miss == nil || attempt >= 2 {
				return resp, err
			}
			c.nodeCache.forget(p, miss)
		}
	})
	if errors.Is(err, ErrMessageTooLarge) && !c.caps[pluginpb.Capability_LOAD_BALANCER_STREAM] {
		return nil, fmt.Errorf("%w (%d backend nodes; the plugin does not offer LOAD_BALANCER_STREAM, which takes any number of nodes)", err, len(nodes))
	}
	return resp, err
}

// message is a plan in one EnsureLoadBalancerRequest.
func (p *backendPlan) message(clusterName string, svc []byte) (*pluginpb.EnsureLoadBalancerRequest, error) {
	fill, err := encodeNodes(p.fill)
	if err != nil {
		return nil, err
	}
	req := &pluginpb.EnsureLoadBalancerRequest{ClusterName: clusterName, Service: svc, Nodes: fill, NodeRefs: p.refs, NodeCacheSession: p.session}
	if p.session != "" {
		req.NodeSet, req.NodeCount = p.digest, uint32(p.count)
	}
	return req, nil
}

// sendBackends makes one LOAD_BALANCER_STREAM call: the request in
// messages of at most MessageBudget bytes, the refs and then the nodes,
// encoded as they are sent, so that no more than one message of them is
// held at a time.
func sendBackends[Res any](ctx context.Context, open func(context.Context, ...grpc.CallOption) (grpc.ClientStreamingClient[pluginpb.EnsureLoadBalancerRequest, Res], error),
	clusterName, clusterID string, svc []byte, p *backendPlan, opts ...grpc.CallOption) (*Res, error) {
	// Returning before the stream is closed cancels it, and the plugin
	// changes nothing (see receiveBackends).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := open(ctx, opts...)
	if err != nil {
		return nil, err
	}
	msg := &pluginpb.EnsureLoadBalancerRequest{ClusterName: clusterName, ClusterId: clusterID, Service: svc, NodeCount: uint32(len(p.fill)), NodeCacheSession: p.session}
	if p.session != "" {
		msg.NodeSet, msg.NodeCount = p.digest, uint32(p.count)
	}
	size, first := proto.Size(msg), true
	// add puts n bytes more in the message, after sending it when they
	// would not fit (a first message goes even with nothing added).
	add := func(n int) error {
		if size+n > MessageBudget && (first || len(msg.Nodes)+len(msg.NodeRefs) > 0) {
			if err := stream.Send(msg); err != nil {
				return err
			}
			msg, size, first = &pluginpb.EnsureLoadBalancerRequest{}, 0, false
		}
		size += n
		return nil
	}
	for _, r := range p.refs {
		if err := add(refBytes(r)); err != nil {
			return sendFailed(stream, err)
		}
		msg.NodeRefs = append(msg.NodeRefs, r)
	}
	for _, n := range p.fill {
		b, err := encodeNode(n)
		if err != nil {
			return nil, err
		}
		if err := add(nodeBytes(b)); err != nil {
			return sendFailed(stream, err)
		}
		msg.Nodes = append(msg.Nodes, b)
	}
	if first || len(msg.Nodes)+len(msg.NodeRefs) > 0 {
		if err := stream.Send(msg); err != nil {
			return sendFailed(stream, err)
		}
	}
	return stream.CloseAndRecv()
}

// sendFailed: io.EOF from Send is the plugin having ended the call, whose
// status comes with CloseAndRecv.
func sendFailed[Res any](stream grpc.ClientStreamingClient[pluginpb.EnsureLoadBalancerRequest, Res], err error) (*Res, error) {
	if errors.Is(err, io.EOF) {
		if _, err := stream.CloseAndRecv(); err != nil {
			return nil, err
		}
		return nil, errors.New("the plugin ended the stream before it was sent")
	}
	return nil, err
}

func (l loadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *corev1.Service) error {
	b, err := encodeService(svc)
	if err != nil {
		return err
	}
	_, err = call(ctx, "EnsureLoadBalancerDeleted", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.EnsureLoadBalancerDeletedResponse, error) {
		return l.c.rpc.EnsureLoadBalancerDeleted(ctx, &pluginpb.LoadBalancerRequest{ClusterName: clusterName, ClusterId: l.c.id(), Service: b}, opts...)
	})
	return err
}

// ownedLoadBalancer is the load balancer of a plugin that keeps ownership
// records (provider.LoadBalancerOwnership).
type ownedLoadBalancer struct{ loadBalancer }

func (l ownedLoadBalancer) LoadBalancerOwner(ctx context.Context, clusterName string, svc *corev1.Service) (provider.LoadBalancerOwner, bool, error) {
	b, err := encodeService(svc)
	if err != nil {
		return provider.LoadBalancerOwner{}, false, err
	}
	resp, err := call(ctx, "LoadBalancerOwner", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.LoadBalancerOwnerResponse, error) {
		return l.c.rpc.LoadBalancerOwner(ctx, &pluginpb.LoadBalancerRequest{ClusterName: clusterName, ClusterId: l.c.id(), Service: b}, opts...)
	})
	if err != nil {
		return provider.LoadBalancerOwner{}, false, err
	}
	return ownerFromProto(resp.GetOwner()), resp.GetExists(), nil
}

func (l ownedLoadBalancer) ListLoadBalancerOwners(ctx context.Context, clusterName string) ([]provider.OwnedLoadBalancer, error) {
	resp, err := call(ctx, "ListLoadBalancerOwners", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.ListLoadBalancerOwnersResponse, error) {
		return l.c.rpc.ListLoadBalancerOwners(ctx, &pluginpb.ListLoadBalancerOwnersRequest{ClusterName: clusterName, ClusterId: l.c.id()}, opts...)
	})
	if err != nil {
		return nil, err
	}
	out := make([]provider.OwnedLoadBalancer, 0, len(resp.GetLoadBalancers()))
	for _, o := range resp.GetLoadBalancers() {
		out = append(out, provider.OwnedLoadBalancer{Name: o.GetName(), LoadBalancerOwner: ownerFromProto(o.GetOwner()),
			ServiceNamespace: o.GetServiceNamespace(), ServiceName: o.GetServiceName()})
	}
	return out, nil
}
