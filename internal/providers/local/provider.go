// Package local is the provider for a cluster whose machines are not in a
// cloud (bare metal, a lab, this laptop): the host running Outrigger is the
// cloud. Its load balancers have one of two data planes (Config.DataPlane):
//
//   - proxy (default): real TCP and UDP proxies inside the Outrigger
//     process, on VIPs from a pool of addresses of this machine (a loopback
//     range by default), forwarding to each backend node's
//     InternalIP:nodePort and leaving out nodes whose health check fails;
//   - nodes: Outrigger only allocates the VIPs; the nodes serve them. The
//     announcer (package announce, the outrigger-local-lb DaemonSet) puts
//     each VIP on one eligible node, which answers ARP for it, and
//     kube-proxy there handles the packets (ingress ipMode VIP), so the
//     client's address is kept with externalTrafficPolicy: Local.
//
// Its instances are the nodes themselves, and a node's addresses are the
// ones its kubelet reported. Machine states come from an instance API when
// the cloud-config names one (instances.url, as the real-cluster harness
// serves); without it a machine it cannot see is taken to exist and run, so
// the lifecycle controller never deletes or taints a node.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ProviderName is the --cloud-provider name.
const ProviderName = "local"

// Config is the provider's cloud-config (YAML or JSON); every field is
// optional.
type Config struct {
	// Pool is the prefix VIPs are allocated from; every address in it must
	// be assignable on this machine. Default 127.0.100.0/24 (Linux answers
	// on all of 127.0.0.0/8 without configuration).
	Pool string `json:"pool,omitempty"`
	// HealthCheck configures the probes of backend nodes.
	HealthCheck HealthCheckConfig `json:"healthCheck,omitempty"`
	// DialTimeout bounds a connection to a backend. Default 2s.
	DialTimeout string `json:"dialTimeout,omitempty"`
	// ConnectWait is how long a new TCP connection is held while no
	// backend accepts it (a Service just provisioned, its nodes' ports not
	// open yet), retried with backoff, before it is closed. Default 5s.
	ConnectWait string `json:"connectWait,omitempty"`
	// UDPIdleTimeout ends a UDP flow after this long without packets.
	// Default 60s.
	UDPIdleTimeout string `json:"udpIdleTimeout,omitempty"`
	// DataPlane is who serves the VIPs: "proxy" (default), proxies in
	// this process; "nodes", the cluster's nodes, announced by the
	// outrigger-local-lb DaemonSet (the pool must then be on the nodes'
	// network).
	DataPlane string `json:"dataPlane,omitempty"`
	// Instances, when set, is where the machines' states are: without it
	// every node's machine is taken to exist and run.
	Instances InstancesConfig `json:"instances,omitempty"`
}

// InstancesConfig points at an instance API: GET URL/instances/NODE
// answers 200 {"state": "running"|"stopped"} for a machine that exists, and
// for one that does not either 200 {"state": "terminated"} or 404
// {"code": "InstanceNotFound"} (the real-cluster harness serves it). Any
// other answer, a bare 404 among them (a wrong URL, a proxy's default
// page), is an error: a machine is gone only when the API says so.
type InstancesConfig struct {
	URL string `json:"url,omitempty"`
	// Timeout of one request. Default 5s.
	Timeout string `json:"timeout,omitempty"`
}

// Data planes.
const (
	DataPlaneProxy = "proxy"
	DataPlaneNodes = "nodes"
)

// HealthCheckConfig configures the probes of backend nodes: an HTTP GET of
// /healthz on kube-proxy's health port, or on the Service's
// healthCheckNodePort when its externalTrafficPolicy is Local.
type HealthCheckConfig struct {
	// KubeProxyPort is kube-proxy's healthz port. Default 10256.
	KubeProxyPort int32 `json:"kubeProxyPort,omitempty"`
	// Interval between probes of one node. Default 2s.
	Interval string `json:"interval,omitempty"`
	// Timeout of one probe. Default 1s.
	Timeout string `json:"timeout,omitempty"`
	// UnhealthyThreshold is how many failed probes in a row take a node
	// out. Default 2.
	UnhealthyThreshold int `json:"unhealthyThreshold,omitempty"`
	// Disabled turns health checking off: every backend node gets traffic.
	Disabled bool `json:"disabled,omitempty"`
}

// settings are the parsed Config.
type settings struct {
	pool               netip.Prefix
	kubeProxyPort      int32
	interval, timeout  time.Duration
	unhealthyThreshold int
	healthDisabled     bool
	dialTimeout        time.Duration
	connectWait        time.Duration
	udpIdle            time.Duration
	dataPlane          string
	instancesURL       string
	instancesTimeout   time.Duration
}

// Pool reads the VIP pool from a cloud-config, as the provider does; the
// announcer serves the same pool.
func Pool(config io.Reader) (netip.Prefix, error) {
	s, err := parseConfig(config)
	return s.pool, err
}

func parseConfig(r io.Reader) (settings, error) {
	s := settings{
		pool:               netip.MustParsePrefix("127.0.100.0/24"),
		kubeProxyPort:      10256,
		interval:           2 * time.Second,
		timeout:            time.Second,
		unhealthyThreshold: 2,
		dialTimeout:        2 * time.Second,
		connectWait:        5 * time.Second,
		udpIdle:            60 * time.Second,
		dataPlane:          DataPlaneProxy,
		instancesTimeout:   5 * time.Second,
	}
	var cfg Config
	if _, err := provider.DecodeConfig(r, &cfg); err != nil {
		return s, err
	}
	var errs []error
	if cfg.Pool != "" {
		p, err := netip.ParsePrefix(cfg.Pool)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("cloud-config pool %q: %w", cfg.Pool, err))
		case p.Addr().Is4() && p.Bits() > 30, p.Addr().Is6() && p.Bits() > 126:
			errs = append(errs, fmt.Errorf("cloud-config pool %q holds no usable address", cfg.Pool))
		default:
			s.pool = p.Masked()
		}
	}
	duration := func(name, v string, into *time.Duration) {
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("cloud-config %s %q must be a positive duration such as 2s", name, v))
			return
		}
		*into = d
	}
	duration("healthCheck.interval", cfg.HealthCheck.Interval, &s.interval)
	duration("healthCheck.timeout", cfg.HealthCheck.Timeout, &s.timeout)
	duration("dialTimeout", cfg.DialTimeout, &s.dialTimeout)
	duration("connectWait", cfg.ConnectWait, &s.connectWait)
	duration("udpIdleTimeout", cfg.UDPIdleTimeout, &s.udpIdle)
	duration("instances.timeout", cfg.Instances.Timeout, &s.instancesTimeout)
	if u := cfg.Instances.URL; u != "" {
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			errs = append(errs, fmt.Errorf("cloud-config instances.url %q must be an http(s) URL", u))
		}
		s.instancesURL = strings.TrimSuffix(u, "/")
	}
	if p := cfg.HealthCheck.KubeProxyPort; p != 0 {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("cloud-config healthCheck.kubeProxyPort %d is not a port", p))
		}
		s.kubeProxyPort = p
	}
	if n := cfg.HealthCheck.UnhealthyThreshold; n != 0 {
		if n < 1 {
			errs = append(errs, fmt.Errorf("cloud-config healthCheck.unhealthyThreshold must be at least 1, got %d", n))
		}
		s.unhealthyThreshold = n
	}
	s.healthDisabled = cfg.HealthCheck.Disabled
	switch cfg.DataPlane {
	case "":
	case DataPlaneProxy, DataPlaneNodes:
		s.dataPlane = cfg.DataPlane
	default:
		errs = append(errs, fmt.Errorf("cloud-config dataPlane %q must be %q or %q", cfg.DataPlane, DataPlaneProxy, DataPlaneNodes))
	}
	return s, errors.Join(errs...)
}

// Provider implements cloudprovider.Interface with LoadBalancer and
// InstancesV2.
type Provider struct {
	lbs       *balancers
	instances *instanceClient // nil: every machine exists and runs
}

var (
	_ cloudprovider.Interface    = (*Provider)(nil)
	_ cloudprovider.InstancesV2  = (*Provider)(nil)
	_ cloudprovider.InformerUser = (*Provider)(nil)
)

// SetInformers implements cloudprovider.InformerUser: the addresses
// Services' statuses hold are watched, so that a restarted process (or a new
// leader) never gives a Service an address another Service still
// advertises. Outrigger, as upstream, starts the informers and waits for
// them before any controller runs.
func (p *Provider) SetInformers(factory informers.SharedInformerFactory) {
	hold := func(obj any) {
		if svc, ok := obj.(*corev1.Service); ok {
			p.lbs.vips.holdStatus(svc.UID, svc)
		}
	}
	reg, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    hold,
		UpdateFunc: func(_, obj any) { hold(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if svc, ok := obj.(*corev1.Service); ok {
				p.lbs.vips.holdStatus(svc.UID, nil)
			}
		},
	})
	if err == nil {
		p.lbs.vips.heldSynced.Store(&reg)
	}
}

// New is the provider's factory (a cloudprovider.Factory).
func New(config io.Reader) (cloudprovider.Interface, error) {
	s, err := parseConfig(config)
	if err != nil {
		return nil, err
	}
	p := &Provider{lbs: newBalancers(s)}
	if s.instancesURL != "" {
		p.instances = &instanceClient{base: s.instancesURL, http: &http.Client{Timeout: s.instancesTimeout}}
	}
	return p, nil
}

// Initialize implements cloudprovider.Interface. Load balancers stop when
// the process stops; nothing else holds resources.
func (p *Provider) Initialize(_ cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	go func() {
		<-stop
		p.lbs.closeAll()
	}()
}

// LoadBalancer implements cloudprovider.Interface.
func (p *Provider) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return p.lbs, true }

// Instances implements cloudprovider.Interface; InstancesV2 is offered.
func (p *Provider) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 implements cloudprovider.Interface.
func (p *Provider) InstancesV2() (cloudprovider.InstancesV2, bool) { return p, true }

// Zones implements cloudprovider.Interface.
func (p *Provider) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters implements cloudprovider.Interface.
func (p *Provider) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes implements cloudprovider.Interface: pod routing is the network
// plugin's job on machines outside a cloud.
func (p *Provider) Routes() (cloudprovider.Routes, bool) { return nil, false }

// ProviderName implements cloudprovider.Interface.
func (p *Provider) ProviderName() string { return ProviderName }

// HasClusterID implements cloudprovider.Interface.
func (p *Provider) HasClusterID() bool { return true }

// Platforms implements provider.Platforms: nodes of local://<name>.
func (p *Provider) Platforms() []string { return []string{ProviderName} }

// InstanceExists asks the instance API when one is configured. Without
// one it is always true: this provider cannot see machines, and a node must
// never be deleted because of what it cannot see.
func (p *Provider) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	if p.instances == nil {
		return true, nil
	}
	state, err := p.instances.state(ctx, node.Name)
	return state != "", err
}

// InstanceShutdown is whether the instance API says the machine is
// stopped; always false without one.
func (p *Provider) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	if p.instances == nil {
		return false, nil
	}
	state, err := p.instances.state(ctx, node.Name)
	return state == "stopped", err
}

// instanceClient reads machine states from an instance API.
type instanceClient struct {
	base string
	http *http.Client
}

// state is the machine's state, "" when it does not exist.
func (c *instanceClient) state(ctx context.Context, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/instances/"+url.PathEscape(name), nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("instance API: %w", err)
	}
	defer resp.Body.Close()
	var got struct {
		State string `json:"state"`
		Code  string `json:"code"`
	}
	decodeErr := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&got)
	switch {
	case resp.StatusCode == http.StatusNotFound && decodeErr == nil && got.Code == InstanceNotFoundCode:
		return "", nil
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("instance API: %s for %s, not a typed answer (a wrong instances.url?)", resp.Status, name)
	case decodeErr != nil || got.State == "":
		return "", fmt.Errorf("instance API: malformed answer for %s: %v", name, decodeErr)
	case got.State == StateTerminated:
		return "", nil
	}
	return got.State, nil
}

// The instance API's typed answers for a machine that is gone.
const (
	InstanceNotFoundCode = "InstanceNotFound"
	StateTerminated      = "terminated"
)

// ProvidedNodeIPAnnotation is where a kubelet started with
// --cloud-provider=external and --node-ip records the address it was given.
const ProvidedNodeIPAnnotation = "alpha.kubernetes.io/provided-node-ip"

// InstanceMetadata gives the node the providerID local://<name> and keeps
// the addresses its kubelet reported (or the --node-ip it was started with).
// With an instance API, a machine it does not know is not this provider's:
// cloudprovider.InstanceNotFound.
func (p *Provider) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	if p.instances != nil {
		state, err := p.instances.state(ctx, node.Name)
		if err != nil {
			return nil, err
		}
		if state == "" {
			return nil, cloudprovider.InstanceNotFound
		}
	}
	md := &cloudprovider.InstanceMetadata{ProviderID: ProviderName + "://" + node.Name, InstanceType: "local"}
	seen := map[corev1.NodeAddress]bool{}
	add := func(a corev1.NodeAddress) {
		if !seen[a] {
			seen[a] = true
			md.NodeAddresses = append(md.NodeAddresses, a)
		}
	}
	if v := node.Annotations[ProvidedNodeIPAnnotation]; v != "" {
		for _, ip := range strings.Split(v, ",") {
			if _, err := netip.ParseAddr(ip); err == nil {
				add(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
			}
		}
	}
	for _, a := range node.Status.Addresses {
		add(a)
	}
	add(corev1.NodeAddress{Type: corev1.NodeHostName, Address: node.Name})
	return md, nil
}
