package plugin

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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

// ListenOptions loosen Listen's defaults, each on purpose.
type ListenOptions struct {
	// TLS serves TCP (required there) or a unix socket.
	TLS *tls.Config
	// Insecure serves TCP with TLS but without client certificates:
	// anyone who reaches the port may call the plugin. Only for a network
	// nobody else reaches.
	Insecure bool
	// PeerUID is the uid a unix socket's client must run as; nil: this
	// process's own.
	PeerUID *int
}

// Listen opens endpoint with the safe defaults: "unix:///path/plugin.sock"
// for processes of this uid only (see listenUnix), or "host:port" for TCP
// with mutual TLS (tlsConfig must require and verify client
// certificates, as ServerTLS's does): a plugin may create and delete cloud
// resources, so nobody else may call it.
func Listen(endpoint string, tlsConfig *tls.Config) (net.Listener, error) {
	return ListenWith(endpoint, ListenOptions{TLS: tlsConfig})
}

// ListenWith is Listen with options.
func ListenWith(endpoint string, o ListenOptions) (net.Listener, error) {
	tlsConfig := o.TLS
	if path, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		uid := os.Geteuid()
		if o.PeerUID != nil {
			uid = *o.PeerUID
		}
		ln, err := listenUnix(path, uid)
		if err != nil || tlsConfig == nil {
			return ln, err
		}
		return tls.NewListener(ln, withH2(tlsConfig)), nil
	}
	if tlsConfig == nil {
		return nil, fmt.Errorf("refusing to serve %q over TCP without TLS: use unix:///path or give a certificate", endpoint)
	}
	verified := tlsConfig.ClientAuth == tls.RequireAndVerifyClientCert ||
		(tlsConfig.ClientAuth == tls.RequireAnyClientCert && tlsConfig.VerifyConnection != nil) // ServerTLS's
	if !verified && !o.Insecure {
		return nil, fmt.Errorf("refusing to serve %q over TCP without client authentication: give a client CA (mutual TLS), or --insecure if nobody else can reach the port", endpoint)
	}
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, withH2(tlsConfig)), nil
}

// withH2: gRPC clients insist on negotiating HTTP/2 by ALPN.
func withH2(c *tls.Config) *tls.Config {
	c = c.Clone()
	if !slices.Contains(c.NextProtos, "h2") {
		c.NextProtos = append(c.NextProtos, "h2")
	}
	return c
}

// Serve serves provider on ln until ctx ends, without calling its
// Initialize.
func Serve(ctx context.Context, ln net.Listener, provider cloudprovider.Interface, info Info) error {
	return ServeWith(ctx, ln, provider, info, ServeOptions{})
}

// ServeWith serves provider on ln until ctx ends, as o says.
func ServeWith(ctx context.Context, ln net.Listener, provider cloudprovider.Interface, info Info, o ServeOptions) error {
	var opts []grpc.ServerOption
	s := newServer(provider, info)
	if o.ClientBuilder != nil {
		init := newInitializer(provider, o.ClientBuilder, ctx.Done())
		opts = append(opts, grpc.ChainUnaryInterceptor(init.unary), grpc.ChainStreamInterceptor(init.stream))
		s.initialized = init.ready
	}
	srv := grpc.NewServer(opts...)
	pluginpb.RegisterCloudProviderServer(srv, s)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Main is a plugin's whole main: it builds the provider with factory from
// the --cloud-config file (if given), serves it on --endpoint until SIGINT
// or SIGTERM, and exits non-zero on error. The provider's Initialize runs
// on the first call of a leading Outrigger (ServeOptions), with a client
// builder from --kubeconfig or the pod's ServiceAccount.
func Main(factory cloudprovider.Factory, info Info) {
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	endpoint := fs.String("endpoint", DefaultEndpoint, "unix:///path (its directory is created private if missing), or host:port with --tls-cert, --tls-key and --tls-client-ca")
	config := fs.String("cloud-config", "", "the provider's configuration file")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig for the provider's Kubernetes clients (its Initialize's client builder); empty: the pod's ServiceAccount, if mounted")
	certFile := fs.String("tls-cert", "", "server certificate (PEM), for TCP")
	keyFile := fs.String("tls-key", "", "server key (PEM), for TCP")
	clientCA := fs.String("tls-client-ca", "", "CA (PEM) client certificates must chain to (mutual TLS); required over TCP unless --insecure")
	var clientSANs []string
	fs.Func("tls-client-san", "a DNS name or URI (a SPIFFE ID) the client's certificate must name, with --tls-client-ca (repeatable; none: any certificate the CA signed)", func(v string) error {
		clientSANs = append(clientSANs, v)
		return nil
	})
	insecure := fs.Bool("insecure", false, "over TCP, serve without client authentication: anyone who reaches the port may call the plugin")
	peer := fs.Int("peer-uid", -1, "on a unix socket, the uid Outrigger runs as (default: this plugin's own)")
	_ = fs.Parse(os.Args[1:])
	lo := ListenOptions{Insecure: *insecure}
	if *peer >= 0 {
		lo.PeerUID = peer
	}
	if *insecure {
		fmt.Fprintf(os.Stderr, "%s: warning: --insecure: serving without client authentication, anyone who reaches %s may create and delete cloud resources\n", os.Args[0], *endpoint)
	}
	if err := run(factory, info, *endpoint, *config, *kubeconfig, *certFile, *keyFile, *clientCA, clientSANs, lo); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[0], err)
		os.Exit(1)
	}
}

func run(factory cloudprovider.Factory, info Info, endpoint, config, kubeconfig, certFile, keyFile, clientCA string, clientSANs []string, lo ListenOptions) error {
	var cfg io.Reader
	if config != "" {
		f, err := os.Open(config)
		if err != nil {
			return fmt.Errorf("cannot read --cloud-config: %w", err)
		}
		defer f.Close()
		cfg = f
	}
	provider, err := factory(cfg)
	if err != nil {
		return err
	}
	var tlsConfig *tls.Config
	if certFile != "" || keyFile != "" {
		if tlsConfig, err = ServerTLS(certFile, keyFile, clientCA, clientSANs); err != nil {
			return err
		}
	}
	lo.TLS = tlsConfig
	ln, err := ListenWith(endpoint, lo)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return ServeWith(ctx, ln, provider, info, ServeOptions{ClientBuilder: ClientBuilderFor(kubeconfig)})
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
