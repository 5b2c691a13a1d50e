package plugin

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ProviderName is the --cloud-provider name of the plugin client.
const ProviderName = "grpc"

// Config is the grpc provider's cloud-config.
type Config struct {
	// Endpoint is unix:///path/to/plugin.sock, or host:port (TLS required).
	Endpoint string `json:"endpoint"`
	// TLS is required for host:port endpoints.
	TLS *TLSConfig `json:"tls,omitempty"`
	// ConnectTimeout bounds the wait for the plugin at start. Default 30s.
	ConnectTimeout string `json:"connectTimeout,omitempty"`
	// ReconnectMaxDelay caps the backoff between attempts to reach a
	// plugin that went away (crashed, restarted, upgraded). Default 5s.
	ReconnectMaxDelay string `json:"reconnectMaxDelay,omitempty"`
	// PeerUID is the uid the plugin serving a unix socket must run as
	// (checked by the kernel's credentials on every connection). Default:
	// Outrigger's own.
	PeerUID *int `json:"peerUID,omitempty"`
}

// TLSConfig names PEM files. CAFile verifies the plugin's certificate;
// CertFile and KeyFile are Outrigger's client certificate (mutual TLS).
type TLSConfig struct {
	CAFile     string `json:"caFile"`
	CertFile   string `json:"certFile,omitempty"`
	KeyFile    string `json:"keyFile,omitempty"`
	ServerName string `json:"serverName,omitempty"`
}

// NewProvider is the grpc provider's factory: it connects to the plugin
// the cloud-config names, and asks what it offers.
func NewProvider(config io.Reader) (cloudprovider.Interface, error) {
	var cfg Config
	present, err := provider.DecodeConfig(config, &cfg)
	switch {
	case err != nil:
		return nil, err
	case !present:
		return nil, errors.New("the grpc provider needs --cloud-config with at least \"endpoint: unix:///path/to/plugin.sock\"")
	}
	timeout := 30 * time.Second
	if cfg.ConnectTimeout != "" {
		if timeout, err = time.ParseDuration(cfg.ConnectTimeout); err != nil || timeout <= 0 {
			return nil, fmt.Errorf("cloud-config connectTimeout %q must be a positive duration", cfg.ConnectTimeout)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Dial(ctx, cfg)
}

// Dial connects to a plugin; ctx bounds the wait for its first answer.
func Dial(ctx context.Context, cfg Config) (cloudprovider.Interface, error) {
	creds, target, err := transport(cfg)
	if err != nil {
		return nil, err
	}
	maxDelay := DefaultReconnectMaxDelay
	if cfg.ReconnectMaxDelay != "" {
		if maxDelay, err = time.ParseDuration(cfg.ReconnectMaxDelay); err != nil || maxDelay <= 0 {
			return nil, fmt.Errorf("cloud-config reconnectMaxDelay %q must be a positive duration", cfg.ReconnectMaxDelay)
		}
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		// A plugin restarting is waited for (within each call's deadline),
		// not failed fast. Answers may pass gRPC's default 4 MiB (see
		// MaxAnswerBytes); what Outrigger sends stays within MessageBudget.
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(MaxAnswerBytes))}, reconnectOptions(cfg.Endpoint, maxDelay)...)
	if path, ok := strings.CutPrefix(cfg.Endpoint, "unix://"); ok {
		uid := os.Geteuid()
		if cfg.PeerUID != nil {
			uid = *cfg.PeerUID
		}
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return dialUnix(ctx, path, uid)
		}))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: %w", cfg.Endpoint, err)
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	c := &Client{conn: conn, rpc: pluginpb.NewCloudProviderClient(conn), endpoint: cfg.Endpoint, stopWatch: stopWatch}
	fail := func(err error) (cloudprovider.Interface, error) {
		stopWatch()
		conn.Close()
		return nil, err
	}
	info, err := c.rpc.GetPluginInfo(ctx, &pluginpb.GetPluginInfoRequest{})
	if err != nil {
		return fail(fmt.Errorf("plugin at %s did not answer: %w", cfg.Endpoint, err))
	}
	if !slices.Contains(info.GetProtocolVersions(), ProtocolVersion) {
		return fail(fmt.Errorf("plugin %q at %s speaks protocol %v, this Outrigger %s", info.GetName(), cfg.Endpoint, info.GetProtocolVersions(), ProtocolVersion))
	}
	caps, err := c.rpc.GetCapabilities(ctx, &pluginpb.GetCapabilitiesRequest{})
	if err != nil {
		return fail(fmt.Errorf("plugin %q capabilities: %w", info.GetName(), err))
	}
	go watchConnection(watchCtx, conn, cfg.Endpoint)
	c.name, c.hasClusterID, c.platforms = info.GetName(), caps.GetHasClusterId(), caps.GetPlatforms()
	c.gatewayFeatures = caps.GetGatewayFeatures()
	c.caps = map[pluginpb.Capability]bool{}
	for _, cp := range caps.GetCapabilities() {
		c.caps[cp] = true
	}
	if c.caps[pluginpb.Capability_NODE_CACHE] {
		c.nodeCache = newSentNodes(time.Now)
	}
	if c.caps[pluginpb.Capability_NODE_CIDRS] {
		return clientWithCIDRs{c}, nil
	}
	return c, nil
}

func transport(cfg Config) (credentials.TransportCredentials, string, error) {
	if strings.HasPrefix(cfg.Endpoint, "unix://") {
		if cfg.TLS != nil {
			// gRPC's authority for a unix socket.
			tc, err := clientTLS(cfg.TLS, "localhost")
			return credentials.NewTLS(tc), cfg.Endpoint, err
		}
		return insecure.NewCredentials(), cfg.Endpoint, nil
	}
	if cfg.Endpoint == "" {
		return nil, "", errors.New("cloud-config endpoint is empty: give unix:///path/to/plugin.sock or host:port with tls")
	}
	if cfg.TLS == nil {
		return nil, "", fmt.Errorf("refusing to reach plugin %q over TCP without TLS: a plugin creates and deletes cloud resources; use unix:///path or set tls.caFile (and certFile/keyFile for mutual TLS)", cfg.Endpoint)
	}
	host, _, err := net.SplitHostPort(cfg.Endpoint)
	if err != nil {
		return nil, "", fmt.Errorf("cloud-config endpoint %q: want host:port or unix:///path: %w", cfg.Endpoint, err)
	}
	tc, err := clientTLS(cfg.TLS, host)
	if err != nil {
		return nil, "", err
	}
	return credentials.NewTLS(tc), "dns:///" + cfg.Endpoint, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Client is a cloudprovider.Interface served by a plugin.
type Client struct {
	conn         *grpc.ClientConn
	rpc          pluginpb.CloudProviderClient
	endpoint     string
	name         string
	hasClusterID bool
	caps         map[pluginpb.Capability]bool
	platforms    []string
	// gatewayFeatures are those the plugin's Gateway load balancers serve.
	gatewayFeatures []string
	stopWatch       context.CancelFunc
	// nodeCache is what this process sent a NODE_CACHE plugin; nil when
	// the plugin does not offer it.
	nodeCache *sentNodes
	// clusterID is the cluster's identity, sent with every call that makes,
	// lists or deletes (provider.ClusterIdentity).
	clusterID atomic.Pointer[string]
}

// SetClusterID implements provider.ClusterIdentity: the plugin's provider
// is handed it with the calls that carry it.
func (c *Client) SetClusterID(id string) { c.clusterID.Store(&id) }

func (c *Client) id() string {
	if id := c.clusterID.Load(); id != nil {
		return *id
	}
	return ""
}

// clientWithCIDRs adds the CloudAllocator's source when the plugin has it.
type clientWithCIDRs struct{ *Client }

// NodeCIDRs implements provider.NodeCIDRSource.
func (c clientWithCIDRs) NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error) {
	b, err := encodeNode(node)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx, "NodeCIDRs", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.NodeCIDRsResponse, error) {
		return c.rpc.NodeCIDRs(ctx, &pluginpb.InstanceRequest{Node: b}, opts...)
	})
	return resp.GetCidrs(), err
}

// call makes one RPC and maps its error back. An answer about one object
// may be at most MaxObjectAnswerBytes; only the lists may be larger.
func call[T any](ctx context.Context, method string, fn func(context.Context, ...grpc.CallOption) (T, error)) (T, error) {
	var trailer metadata.MD
	opts := []grpc.CallOption{grpc.Trailer(&trailer)}
	if !listAnswers[method] {
		opts = append(opts, grpc.MaxCallRecvMsgSize(MaxObjectAnswerBytes))
	}
	resp, err := fn(ctx, opts...)
	return resp, fromStatus(method, err, trailer)
}

// listAnswers are the calls whose answers grow with the cluster, bounded
// by MaxAnswerBytes.
var listAnswers = map[string]bool{"ListRoutes": true, "ListLoadBalancerOwners": true, "InstancesStatus": true}

// Close closes the connection.
func (c *Client) Close() error {
	c.stopWatch()
	return c.conn.Close()
}

// Ready asks the plugin's Probe; Outrigger's /readyz follows it.
func (c *Client) Ready(ctx context.Context) error {
	resp, err := call(ctx, "Probe", func(ctx context.Context, opts ...grpc.CallOption) (*pluginpb.ProbeResponse, error) {
		return c.rpc.Probe(ctx, &pluginpb.ProbeRequest{}, append(opts, grpc.WaitForReady(false))...)
	})
	if err != nil {
		return err
	}
	if !resp.GetReady() {
		return fmt.Errorf("plugin %q not ready: %s", c.name, resp.GetMessage())
	}
	return nil
}

// Initialize implements cloudprovider.Interface.
func (c *Client) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// ProviderName is the plugin's name.
func (c *Client) ProviderName() string { return c.name }

// HasClusterID implements cloudprovider.Interface.
func (c *Client) HasClusterID() bool { return c.hasClusterID }

// Instances implements cloudprovider.Interface; plugins serve InstancesV2.
func (c *Client) Instances() (cloudprovider.Instances, bool) { return nil, false }

// Zones implements cloudprovider.Interface.
func (c *Client) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters implements cloudprovider.Interface.
func (c *Client) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// InstancesV2 implements cloudprovider.Interface when the plugin has
// INSTANCES (and provider.BatchInstances when it has INSTANCES_BATCH).
func (c *Client) InstancesV2() (cloudprovider.InstancesV2, bool) {
	if !c.caps[pluginpb.Capability_INSTANCES] {
		return nil, false
	}
	if c.caps[pluginpb.Capability_INSTANCES_BATCH] {
		return batchInstances{instances{c}}, true
	}
	return instances{c}, true
}

// LoadBalancer implements cloudprovider.Interface when the plugin has it.
func (c *Client) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if !c.caps[pluginpb.Capability_LOAD_BALANCER] {
		return nil, false
	}
	if c.caps[pluginpb.Capability_LOAD_BALANCER_OWNERSHIP] {
		return ownedLoadBalancer{loadBalancer{c}}, true
	}
	return loadBalancer{c}, true
}

// Platforms implements provider.Platforms: the providerID schemes the
// plugin states (none: it did not say).
func (c *Client) Platforms() []string { return slices.Clone(c.platforms) }

// Routes implements cloudprovider.Interface when the plugin has them.
func (c *Client) Routes() (cloudprovider.Routes, bool) {
	if !c.caps[pluginpb.Capability_ROUTES] {
		return nil, false
	}
	return routes{c}, true
}

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
