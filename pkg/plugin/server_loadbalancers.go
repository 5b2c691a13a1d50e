// The load balancer calls of the plugin side: a Service and its backend
// Nodes decoded, the provider called, ownership records answered.

package plugin

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func (s *server) service(req interface {
	GetService() []byte
	GetClusterId() string
}) (*corev1.Service, error) {
	if s.lb == nil {
		return nil, unimplemented("load balancers")
	}
	s.identify(req.GetClusterId())
	return decodeService(req.GetService())
}

// identify hands the provider the cluster's identity a request carries
// (provider.ClusterIdentity) when it is new: the plugin learns it from the
// Outrigger it serves, whose leader read it, before that leader's first
// call that makes or lists anything.
func (s *server) identify(id string) {
	c, ok := s.provider.(provider.ClusterIdentity)
	if !ok || id == "" {
		return
	}
	s.clusterMu.Lock()
	defer s.clusterMu.Unlock()
	if id != s.clusterID {
		c.SetClusterID(id)
		s.clusterID = id
	}
}

func (s *server) GetLoadBalancerName(ctx context.Context, req *pluginpb.LoadBalancerRequest) (*pluginpb.GetLoadBalancerNameResponse, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	return &pluginpb.GetLoadBalancerNameResponse{Name: s.lb.GetLoadBalancerName(ctx, req.GetClusterName(), svc)}, nil
}

func (s *server) GetLoadBalancer(ctx context.Context, req *pluginpb.LoadBalancerRequest) (*pluginpb.GetLoadBalancerResponse, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	st, exists, err := s.lb.GetLoadBalancer(ctx, req.GetClusterName(), svc)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &pluginpb.GetLoadBalancerResponse{Exists: exists}
	if exists && st != nil {
		if resp.Status, err = encode(st); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

func (s *server) EnsureLoadBalancer(ctx context.Context, req *pluginpb.EnsureLoadBalancerRequest) (*pluginpb.EnsureLoadBalancerResponse, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	nodes, err := s.unaryBackends(ctx, req)
	if err != nil {
		return nil, err
	}
	st, err := s.lb.EnsureLoadBalancer(ctx, req.GetClusterName(), svc, nodes)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	b, err := encode(st)
	return &pluginpb.EnsureLoadBalancerResponse{Status: b}, err
}

func (s *server) UpdateLoadBalancer(ctx context.Context, req *pluginpb.EnsureLoadBalancerRequest) (*pluginpb.UpdateLoadBalancerResponse, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	nodes, err := s.unaryBackends(ctx, req)
	if err != nil {
		return nil, err
	}
	return &pluginpb.UpdateLoadBalancerResponse{}, toStatus(ctx, s.lb.UpdateLoadBalancer(ctx, req.GetClusterName(), svc, nodes))
}

func (s *server) unaryBackends(ctx context.Context, req *pluginpb.EnsureLoadBalancerRequest) ([]*corev1.Node, error) {
	fill, err := decodeNodes(req.GetNodes())
	if err != nil {
		return nil, err
	}
	return s.backends(ctx, req.GetNodeCacheSession(), req.GetNodeSet(), int(req.GetNodeCount()), req.GetNodeRefs(), fill)
}

// backends is a call's backend Nodes: without a node cache session the
// Nodes it carried; with one, its refs resolved in the session after the
// Nodes it carried were kept there. The Nodes are shared between calls,
// as an informer's are: a provider reads them and changes none.
func (s *server) backends(ctx context.Context, session, set string, count int, refs []*pluginpb.NodeRef, fill []*corev1.Node) ([]*corev1.Node, error) {
	if session == "" {
		if len(refs) > 0 || set != "" {
			return nil, status.Error(codes.InvalidArgument, "node_refs or node_set without a node_cache_session")
		}
		return fill, nil
	}
	s.nodes.store(session, fill)
	trailer := metadata.Pairs(MetadataNodeCache, NodeCacheKept)
	var nodes []*corev1.Node
	var err error
	if len(refs) == 0 && count > 0 {
		// The backends by their set's digest alone.
		var ok bool
		if nodes, ok = s.nodes.set(session, set); !ok || len(nodes) != count {
			err = setMissError(set)
		}
	} else {
		var missing []string
		if nodes, missing = s.nodes.resolve(session, refs); len(missing) > 0 {
			err = missError(missing)
		} else if set != "" {
			if d := digest(refs); d != set {
				return nil, status.Errorf(codes.InvalidArgument, "node_set %s is not the digest of the node_refs (%s)", set, d)
			}
			s.nodes.keepSet(session, set, nodes)
		}
	}
	if err != nil {
		trailer.Set(MetadataReason, ReasonNodeCacheMiss)
	}
	_ = grpc.SetTrailer(ctx, trailer)
	if err != nil {
		return nil, err
	}
	return nodes, nil
}

// receiveBackends reads a LOAD_BALANCER_STREAM request to its end: the
// first message's cluster name, Service, node count and node cache
// session, and the refs and nodes of every message, the nodes decoded as
// they arrive. The provider is called only with a complete request: a
// stream the client cancelled, or one that lost backends, is an error,
// since acting on part of the backends would take the others out of the
// load balancer.
func (s *server) receiveBackends(ctx context.Context, recv func() (*pluginpb.EnsureLoadBalancerRequest, error)) (string, *corev1.Service, []*corev1.Node, error) {
	if s.lb == nil {
		return "", nil, nil, unimplemented("load balancers")
	}
	first, err := recv()
	if errors.Is(err, io.EOF) {
		return "", nil, nil, status.Error(codes.InvalidArgument, "empty stream: the first message carries the Service")
	}
	if err != nil {
		return "", nil, nil, err
	}
	s.identify(first.GetClusterId())
	svc, err := decodeService(first.GetService())
	if err != nil {
		return "", nil, nil, err
	}
	want, session := int64(first.GetNodeCount()), first.GetNodeCacheSession()
	// The count comes from the wire: it sizes the slices only up to a bound.
	nodes := make([]*corev1.Node, 0, min(want, 1<<16))
	var refs []*pluginpb.NodeRef
	if session != "" {
		refs = make([]*pluginpb.NodeRef, 0, min(want, 1<<16))
	}
	for m := first; ; {
		for _, b := range m.GetNodes() {
			n, err := decodeNode(b)
			if err != nil {
				return "", nil, nil, err
			}
			nodes = append(nodes, n)
		}
		refs = append(refs, m.GetNodeRefs()...)
		m, err = recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, nil, err
		}
	}
	got, what := int64(len(nodes)), "nodes"
	if session != "" {
		got, what = int64(len(refs)), "node refs"
	}
	// Backends named by their set alone are counted against the set.
	bySet := session != "" && len(refs) == 0 && first.GetNodeSet() != ""
	if got != want && !bySet {
		return "", nil, nil, status.Errorf(codes.InvalidArgument, "the stream carried %d %s, its first message announced %d", got, what, want)
	}
	backends, err := s.backends(ctx, session, first.GetNodeSet(), int(want), refs, nodes)
	if err != nil {
		return "", nil, nil, err
	}
	return first.GetClusterName(), svc, backends, nil
}

func (s *server) EnsureLoadBalancerStream(stream pluginpb.CloudProvider_EnsureLoadBalancerStreamServer) error {
	clusterName, svc, nodes, err := s.receiveBackends(stream.Context(), stream.Recv)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	st, err := s.lb.EnsureLoadBalancer(ctx, clusterName, svc, nodes)
	if err != nil {
		return toStatus(ctx, err)
	}
	b, err := encode(st)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&pluginpb.EnsureLoadBalancerResponse{Status: b})
}

func (s *server) UpdateLoadBalancerStream(stream pluginpb.CloudProvider_UpdateLoadBalancerStreamServer) error {
	clusterName, svc, nodes, err := s.receiveBackends(stream.Context(), stream.Recv)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	if err := s.lb.UpdateLoadBalancer(ctx, clusterName, svc, nodes); err != nil {
		return toStatus(ctx, err)
	}
	return stream.SendAndClose(&pluginpb.UpdateLoadBalancerResponse{})
}

func (s *server) EnsureLoadBalancerDeleted(ctx context.Context, req *pluginpb.LoadBalancerRequest) (*pluginpb.EnsureLoadBalancerDeletedResponse, error) {
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	return &pluginpb.EnsureLoadBalancerDeletedResponse{}, toStatus(ctx, s.lb.EnsureLoadBalancerDeleted(ctx, req.GetClusterName(), svc))
}

func (s *server) LoadBalancerOwner(ctx context.Context, req *pluginpb.LoadBalancerRequest) (*pluginpb.LoadBalancerOwnerResponse, error) {
	if s.owners == nil {
		return nil, unimplemented("LOAD_BALANCER_OWNERSHIP")
	}
	svc, err := s.service(req)
	if err != nil {
		return nil, err
	}
	owner, exists, err := s.owners.LoadBalancerOwner(ctx, req.GetClusterName(), svc)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &pluginpb.LoadBalancerOwnerResponse{Exists: exists, Owner: ownerToProto(owner)}, nil
}

func (s *server) ListLoadBalancerOwners(ctx context.Context, req *pluginpb.ListLoadBalancerOwnersRequest) (*pluginpb.ListLoadBalancerOwnersResponse, error) {
	if s.owners == nil {
		return nil, unimplemented("LOAD_BALANCER_OWNERSHIP")
	}
	s.identify(req.GetClusterId())
	owned, err := s.owners.ListLoadBalancerOwners(ctx, req.GetClusterName())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &pluginpb.ListLoadBalancerOwnersResponse{}
	for _, o := range owned {
		resp.LoadBalancers = append(resp.LoadBalancers, &pluginpb.OwnedLoadBalancer{
			Name: o.Name, Owner: ownerToProto(o.LoadBalancerOwner), ServiceNamespace: o.ServiceNamespace, ServiceName: o.ServiceName,
		})
	}
	return resp, nil
}

func ownerToProto(o provider.LoadBalancerOwner) *pluginpb.LoadBalancerOwner {
	return &pluginpb.LoadBalancerOwner{ClusterName: o.ClusterName, ClusterId: o.ClusterID, ServiceUid: string(o.ServiceUID), Class: o.Class}
}

func ownerFromProto(o *pluginpb.LoadBalancerOwner) provider.LoadBalancerOwner {
	return provider.LoadBalancerOwner{ClusterName: o.GetClusterName(), ClusterID: o.GetClusterId(), ServiceUID: types.UID(o.GetServiceUid()), Class: o.GetClass()}
}
