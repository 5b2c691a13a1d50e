package plugin

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Info identifies a plugin.
type Info struct {
	// Name is the provider name; default: the provider's ProviderName().
	Name string
	// Version is the plugin's own version.
	Version string
}

// server serves one cloudprovider.Interface.
type server struct {
	pluginpb.UnimplementedCloudProviderServer
	info      Info
	provider  cloudprovider.Interface
	instances cloudprovider.InstancesV2
	batch     provider.BatchInstances
	lb        cloudprovider.LoadBalancer
	routes    cloudprovider.Routes
	cidrs     provider.NodeCIDRSource
	owners    provider.LoadBalancerOwnership
	gateways  provider.GatewayLoadBalancer
	// nodes holds the load balancers' backend Nodes (NODE_CACHE).
	nodes *serverNodeCache
	// clusterID is the identity last handed the provider (identify).
	clusterMu sync.Mutex
	clusterID string
	// initialized, when ServeWith initializes the provider, says why it
	// is not (yet): Probe reports not ready then.
	initialized func() error
}

// NewServer returns the gRPC service for provider. Capabilities are what
// the provider offers: InstancesV2 (or Instances, adapted), the optional
// batch lookup and CIDR source, LoadBalancer, Routes.
func NewServer(p cloudprovider.Interface, info Info) pluginpb.CloudProviderServer {
	return newServer(p, info)
}

func newServer(p cloudprovider.Interface, info Info) *server {
	if info.Name == "" {
		info.Name = p.ProviderName()
	}
	s := &server{info: info, provider: p, nodes: newServerNodeCache(time.Now)}
	// The server calls the provider directly: limits, per-object
	// serialization and timeouts are the client's call layer's business,
	// and a second layer here would throttle the plugin on its own and
	// hide the cloud's answers from the client's.
	if inst, ok := provider.InstancesV2(p); ok {
		s.instances = inst
		s.batch, _ = inst.(provider.BatchInstances)
	}
	if lb, ok := p.LoadBalancer(); ok && lb != nil {
		s.lb = lb
		s.owners, _ = lb.(provider.LoadBalancerOwnership)
	}
	if r, ok := p.Routes(); ok && r != nil {
		s.routes = r
	}
	s.cidrs, _ = p.(provider.NodeCIDRSource)
	s.gateways = gatewaysOf(p)
	return s
}

func (s *server) GetPluginInfo(context.Context, *pluginpb.GetPluginInfoRequest) (*pluginpb.GetPluginInfoResponse, error) {
	return &pluginpb.GetPluginInfoResponse{Name: s.info.Name, Version: s.info.Version, ProtocolVersions: []string{ProtocolVersion}}, nil
}

func (s *server) GetCapabilities(context.Context, *pluginpb.GetCapabilitiesRequest) (*pluginpb.GetCapabilitiesResponse, error) {
	resp := &pluginpb.GetCapabilitiesResponse{HasClusterId: s.provider.HasClusterID()}
	add := func(ok bool, c pluginpb.Capability) {
		if ok {
			resp.Capabilities = append(resp.Capabilities, c)
		}
	}
	add(s.instances != nil, pluginpb.Capability_INSTANCES)
	add(s.batch != nil, pluginpb.Capability_INSTANCES_BATCH)
	add(s.lb != nil, pluginpb.Capability_LOAD_BALANCER)
	add(s.routes != nil, pluginpb.Capability_ROUTES)
	add(s.cidrs != nil, pluginpb.Capability_NODE_CIDRS)
	add(s.lb != nil, pluginpb.Capability_LOAD_BALANCER_STREAM)
	add(s.owners != nil, pluginpb.Capability_LOAD_BALANCER_OWNERSHIP)
	add(s.lb != nil, pluginpb.Capability_NODE_CACHE)
	add(s.gateways != nil, pluginpb.Capability_GATEWAY_LOAD_BALANCER)
	if s.gateways != nil {
		resp.GatewayFeatures = s.gateways.GatewayFeatures()
	}
	if p, ok := s.provider.(provider.Platforms); ok {
		resp.Platforms = p.Platforms()
	}
	return resp, nil
}

// Prober is optional for a served provider: Probe answers with it.
type Prober interface {
	Ready(ctx context.Context) error
}

func (s *server) Probe(ctx context.Context, _ *pluginpb.ProbeRequest) (*pluginpb.ProbeResponse, error) {
	if s.initialized != nil {
		if err := s.initialized(); err != nil {
			return &pluginpb.ProbeResponse{Ready: false, Message: err.Error()}, nil
		}
	}
	if p, ok := s.provider.(Prober); ok {
		if err := p.Ready(ctx); err != nil {
			return &pluginpb.ProbeResponse{Ready: false, Message: err.Error()}, nil
		}
	}
	return &pluginpb.ProbeResponse{Ready: true}, nil
}

func unimplemented(capability string) error {
	return status.Errorf(codes.Unimplemented, "this plugin does not offer %s", capability)
}

func (s *server) node(ctx context.Context, req *pluginpb.InstanceRequest) (*corev1.Node, error) {
	if s.instances == nil {
		return nil, unimplemented("instances")
	}
	return decodeNode(req.GetNode())
}

func (s *server) InstanceExists(ctx context.Context, req *pluginpb.InstanceRequest) (*pluginpb.InstanceExistsResponse, error) {
	n, err := s.node(ctx, req)
	if err != nil {
		return nil, err
	}
	ok, err := s.instances.InstanceExists(ctx, n)
	return &pluginpb.InstanceExistsResponse{Exists: ok}, toStatus(ctx, err)
}

func (s *server) InstanceShutdown(ctx context.Context, req *pluginpb.InstanceRequest) (*pluginpb.InstanceShutdownResponse, error) {
	n, err := s.node(ctx, req)
	if err != nil {
		return nil, err
	}
	down, err := s.instances.InstanceShutdown(ctx, n)
	return &pluginpb.InstanceShutdownResponse{Shutdown: down}, toStatus(ctx, err)
}

func (s *server) InstanceMetadata(ctx context.Context, req *pluginpb.InstanceRequest) (*pluginpb.InstanceMetadataResponse, error) {
	n, err := s.node(ctx, req)
	if err != nil {
		return nil, err
	}
	md, err := s.instances.InstanceMetadata(ctx, n)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &pluginpb.InstanceMetadataResponse{Metadata: toMetadata(md)}, nil
}

func (s *server) InstancesStatus(ctx context.Context, req *pluginpb.InstancesStatusRequest) (*pluginpb.InstancesStatusResponse, error) {
	if s.batch == nil {
		return nil, unimplemented("batch instance lookups")
	}
	nodes, err := decodeNodes(req.GetNodes())
	if err != nil {
		return nil, err
	}
	sts, err := s.batch.InstancesStatus(ctx, nodes)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &pluginpb.InstancesStatusResponse{}
	for _, st := range sts {
		out := &pluginpb.InstanceStatus{Exists: st.Exists, Shutdown: st.Shutdown, Metadata: toMetadata(st.Metadata)}
		if st.Err != nil {
			out.Error = st.Err.Error()
		}
		resp.Statuses = append(resp.Statuses, out)
	}
	return resp, nil
}

func (s *server) ListRoutes(ctx context.Context, req *pluginpb.ListRoutesRequest) (*pluginpb.ListRoutesResponse, error) {
	if s.routes == nil {
		return nil, unimplemented("routes")
	}
	s.identify(req.GetClusterId())
	rs, err := s.routes.ListRoutes(ctx, req.GetClusterName())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &pluginpb.ListRoutesResponse{}
	for _, r := range rs {
		resp.Routes = append(resp.Routes, toRoute(r))
	}
	return resp, nil
}

func (s *server) CreateRoute(ctx context.Context, req *pluginpb.CreateRouteRequest) (*pluginpb.CreateRouteResponse, error) {
	if s.routes == nil {
		return nil, unimplemented("routes")
	}
	s.identify(req.GetClusterId())
	return &pluginpb.CreateRouteResponse{}, toStatus(ctx, s.routes.CreateRoute(ctx, req.GetClusterName(), req.GetNameHint(), fromRoute(req.GetRoute())))
}

func (s *server) DeleteRoute(ctx context.Context, req *pluginpb.DeleteRouteRequest) (*pluginpb.DeleteRouteResponse, error) {
	if s.routes == nil {
		return nil, unimplemented("routes")
	}
	s.identify(req.GetClusterId())
	return &pluginpb.DeleteRouteResponse{}, toStatus(ctx, s.routes.DeleteRoute(ctx, req.GetClusterName(), fromRoute(req.GetRoute())))
}

func (s *server) NodeCIDRs(ctx context.Context, req *pluginpb.InstanceRequest) (*pluginpb.NodeCIDRsResponse, error) {
	if s.cidrs == nil {
		return nil, unimplemented("node CIDRs")
	}
	n, err := decodeNode(req.GetNode())
	if err != nil {
		return nil, err
	}
	cidrs, err := s.cidrs.NodeCIDRs(ctx, n)
	return &pluginpb.NodeCIDRsResponse{Cidrs: cidrs}, toStatus(ctx, err)
}
