package plugin

import (
	"context"
	"crypto/x509"
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
