// Package sim is the provider for the simulated cloud in package simapi. It
// is a real HTTP client of that cloud, so everything between Outrigger's
// controllers and a cloud API (timeouts, retries, throttling, partial
// answers) is exercised the way a production provider exercises it.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simapi"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ProviderName is the --cloud-provider name.
const ProviderName = "sim"

// providerIDPrefix starts every providerID this provider sets: sim://<id>.
const providerIDPrefix = ProviderName + "://"

// Config is the provider's cloud-config file (YAML or JSON).
type Config struct {
	// Endpoint is the sim cloud's base URL, e.g. http://127.0.0.1:8480.
	Endpoint string `json:"endpoint"`
	// RequestTimeout bounds one HTTP request. Default 10s.
	RequestTimeout string `json:"requestTimeout,omitempty"`
	// Retries of transient failures (connection errors, 5xx). Default 2.
	Retries *int `json:"retries,omitempty"`
	// Caller names this process in the cloud's call log (sent with every
	// request). Default: HOSTNAME_PID, distinct for every replica.
	Caller string `json:"caller,omitempty"`
}

// ParseConfig reads and validates a cloud-config. Unknown fields are errors,
// so a misspelt key is reported instead of silently ignored.
func ParseConfig(r io.Reader) (Config, time.Duration, int, error) {
	var cfg Config
	present, err := provider.DecodeConfig(r, &cfg)
	switch {
	case err != nil:
		return cfg, 0, 0, err
	case !present && r == nil:
		return cfg, 0, 0, errors.New("the sim provider needs --cloud-config, a YAML file with at least \"endpoint: http://HOST:PORT\"")
	case !present:
		return cfg, 0, 0, errors.New("cloud-config is empty: it needs at least \"endpoint: http://HOST:PORT\"")
	}
	u, err := url.Parse(cfg.Endpoint)
	if cfg.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, 0, 0, fmt.Errorf("cloud-config endpoint %q must be an http:// or https:// URL with a host", cfg.Endpoint)
	}
	timeout := 10 * time.Second
	if cfg.RequestTimeout != "" {
		if timeout, err = time.ParseDuration(cfg.RequestTimeout); err != nil || timeout <= 0 {
			return cfg, 0, 0, fmt.Errorf("cloud-config requestTimeout %q must be a positive duration such as 5s", cfg.RequestTimeout)
		}
	}
	retries := 2
	if cfg.Retries != nil {
		if *cfg.Retries < 0 {
			return cfg, 0, 0, fmt.Errorf("cloud-config retries must not be negative, got %d", *cfg.Retries)
		}
		retries = *cfg.Retries
	}
	return cfg, timeout, retries, nil
}

// New is the provider's factory (a cloudprovider.Factory).
func New(config io.Reader) (cloudprovider.Interface, error) {
	cfg, timeout, retries, err := ParseConfig(config)
	if err != nil {
		return nil, err
	}
	client := simapi.NewClient(cfg.Endpoint, timeout, retries)
	client.Caller = cfg.Caller
	if client.Caller == "" {
		host, _ := os.Hostname()
		client.Caller = host + "_" + strconv.Itoa(os.Getpid())
	}
	return &Provider{client: client}, nil
}

// Provider implements cloudprovider.Interface, cloudprovider.InstancesV2 and
// Outrigger's optional provider.BatchInstances.
type Provider struct {
	client *simapi.Client
	// clusterID is the cluster's identity (provider.ClusterIdentity),
	// tagged on every load balancer and route; "" until Outrigger sets it.
	clusterID atomic.Pointer[string]
}

var (
	_ cloudprovider.Interface   = (*Provider)(nil)
	_ cloudprovider.InstancesV2 = (*Provider)(nil)
	_ provider.BatchInstances   = (*Provider)(nil)
	_ provider.ClusterIdentity  = (*Provider)(nil)
)

// SetClusterID implements provider.ClusterIdentity.
func (p *Provider) SetClusterID(id string) { p.clusterID.Store(&id) }

func (p *Provider) clusterIdentity() string {
	if id := p.clusterID.Load(); id != nil {
		return *id
	}
	return ""
}

// Initialize implements cloudprovider.Interface.
func (p *Provider) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// Instances implements cloudprovider.Interface; the sim offers InstancesV2.
func (p *Provider) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 implements cloudprovider.Interface.
func (p *Provider) InstancesV2() (cloudprovider.InstancesV2, bool) { return p, true }

// Zones implements cloudprovider.Interface; InstancesV2 carries zones.
func (p *Provider) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters implements cloudprovider.Interface.
func (p *Provider) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// ProviderName implements cloudprovider.Interface.
func (p *Provider) ProviderName() string { return ProviderName }

// HasClusterID implements cloudprovider.Interface.
func (p *Provider) HasClusterID() bool { return true }

// Platforms implements provider.Platforms: nodes of sim://<id>.
func (p *Provider) Platforms() []string { return []string{ProviderName} }

// instanceKey is how a node is found in the cloud: by the ID in its
// providerID once set, by its name before.
func instanceKey(node *corev1.Node) (string, error) {
	if id := node.Spec.ProviderID; id != "" {
		if !strings.HasPrefix(id, providerIDPrefix) {
			return "", fmt.Errorf("node %s has providerID %q, which is not a sim providerID (%s<id>)", node.Name, id, providerIDPrefix)
		}
		return strings.TrimPrefix(id, providerIDPrefix), nil
	}
	return node.Name, nil
}

func (p *Provider) get(ctx context.Context, node *corev1.Node) (simapi.Instance, bool, error) {
	key, err := instanceKey(node)
	if err != nil {
		return simapi.Instance{}, false, err
	}
	in, err := p.client.Get(ctx, key)
	if simapi.IsCode(err, simapi.CodeInstanceNotFound) {
		return simapi.Instance{}, false, nil
	}
	if err != nil {
		return simapi.Instance{}, false, err
	}
	return in, in.State != simapi.StateTerminated, nil
}

// InstanceExists implements cloudprovider.InstancesV2: a terminated instance
// does not exist.
func (p *Provider) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	_, exists, err := p.get(ctx, node)
	return exists, err
}

// InstanceShutdown implements cloudprovider.InstancesV2.
func (p *Provider) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	in, exists, err := p.get(ctx, node)
	if err != nil || !exists {
		return false, err
	}
	return in.State == simapi.StateStopped, nil
}

// InstanceMetadata implements cloudprovider.InstancesV2.
func (p *Provider) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	in, exists, err := p.get(ctx, node)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, cloudprovider.InstanceNotFound
	}
	return metadata(in), nil
}

// InstancesStatus implements provider.BatchInstances with one BatchGet call.
func (p *Provider) InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]provider.InstanceStatus, error) {
	var req simapi.BatchGetRequest
	keys := make([]string, len(nodes))
	out := make([]provider.InstanceStatus, len(nodes))
	for i, n := range nodes {
		key, err := instanceKey(n)
		if err != nil {
			out[i] = provider.InstanceStatus{Exists: true, Err: err}
			continue
		}
		keys[i] = key
		if n.Spec.ProviderID != "" {
			req.IDs = append(req.IDs, key)
		} else {
			req.Names = append(req.Names, key)
		}
	}
	resp, err := p.client.BatchGet(ctx, req)
	if err != nil {
		return nil, err
	}
	found := make(map[string]simapi.Instance, 2*len(resp.Instances))
	for _, in := range resp.Instances {
		found[in.ID] = in
		found[in.Name] = in
	}
	for i := range nodes {
		if keys[i] == "" {
			continue
		}
		in, ok := found[keys[i]]
		if !ok || in.State == simapi.StateTerminated {
			out[i] = provider.InstanceStatus{Exists: false}
			continue
		}
		out[i] = provider.InstanceStatus{Exists: true, Shutdown: in.State == simapi.StateStopped, Metadata: metadata(in)}
	}
	return out, nil
}

func metadata(in simapi.Instance) *cloudprovider.InstanceMetadata {
	md := &cloudprovider.InstanceMetadata{
		ProviderID:       providerIDPrefix + in.ID,
		InstanceType:     in.Type,
		Zone:             in.Zone,
		Region:           in.Region,
		AdditionalLabels: in.Labels,
	}
	for _, a := range in.Addresses {
		md.NodeAddresses = append(md.NodeAddresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
	}
	return md
}
