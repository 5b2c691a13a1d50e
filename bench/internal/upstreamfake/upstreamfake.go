// Package upstreamfake serves upstream's fake provider
// (k8s.io/cloud-provider/fake) to the benchmarks, as a second provider with
// only the standard interface next to the sim provider: both CCMs run it,
// Outrigger in the benchmark's process and the upstream CCM in its own.
//
// The fake answers from memory. What a cloud adds around it is added here,
// the same in both processes: the benchmark's latency per call (the fake's
// own RequestDelay), a token bucket that answers a retry hint above its rate
// as a cloud's 429 does, and a count of the calls, served as JSON on a
// loopback address so that the benchmark reads the calls made in another
// process.
//
// With Config.LoadBalancers it also offers load balancers (loadbalancer.go):
// the fake's own keep every call's node list and write a map unlocked, which
// neither thousands of Services nor concurrent workers survive.
package upstreamfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/yaml"
)

// ProviderName is the name both CCMs register the provider under.
const ProviderName = "upstream-fake"

// Config is the provider's cloud-config.
type Config struct {
	// Nodes are the names of the nodes whose instances exist; the fake
	// answers each with the provider ID "fake://<name>".
	Nodes []string `json:"nodes"`
	// Latency is added to every call.
	Latency metav1.Duration `json:"latency"`
	// RateLimit is the calls per second accepted before a call is answered
	// with a retry hint (burst: one second's calls); 0 means no limit.
	RateLimit float64 `json:"rateLimit"`
	// Stats is the loopback address where the call counts are served.
	Stats string `json:"stats"`
	// LoadBalancers offers the LoadBalancer interface.
	LoadBalancers bool `json:"loadBalancers,omitempty"`
	// Routes offers the Routes interface.
	Routes bool `json:"routes,omitempty"`
	// HangPrefix: EnsureLoadBalancer never returns, whatever its context,
	// for Services whose name starts with it, nor InstanceMetadata or
	// CreateRoute for nodes whose name does (a provider hung on some
	// objects).
	HangPrefix string `json:"hangPrefix,omitempty"`
	// HangKind limits HangPrefix to one kind of call: "service"
	// (EnsureLoadBalancer), "node" (InstanceMetadata) or "route"
	// (CreateRoute); empty: all three.
	HangKind string `json:"hangKind,omitempty"`
}

// Calls are the counts served at Config.Stats.
type Calls struct {
	Total     int64            `json:"total"`
	Throttled int64            `json:"throttled"`
	ByOp      map[string]int64 `json:"byOp"`
	// ThrottledByOp are the throttled calls by operation.
	ThrottledByOp map[string]int64 `json:"throttledByOp,omitempty"`
	// Backends counts the load balancers by backend set (BackendKey of
	// their nodes' names).
	Backends map[string]int64 `json:"backends,omitempty"`
	// BackendWrites counts the accepted EnsureLoadBalancer and
	// UpdateLoadBalancer calls: each sets a load balancer's backends.
	BackendWrites int64 `json:"backendWrites,omitempty"`
	// Hung counts the calls hung by Config.HangPrefix, and HungObjects
	// the Services and nodes they hang on.
	Hung        int64 `json:"hung,omitempty"`
	HungObjects int64 `json:"hungObjects,omitempty"`
}

// New builds the provider from its cloud-config and starts serving its
// call counts.
func New(config io.Reader) (cloudprovider.Interface, error) {
	raw, err := io.ReadAll(config)
	if err != nil {
		return nil, fmt.Errorf("reading the upstream-fake cloud-config: %w", err)
	}
	var cfg Config
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return nil, fmt.Errorf("parsing the upstream-fake cloud-config: %w", err)
	}
	ids := make(map[types.NodeName]string, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		ids[types.NodeName(n)] = "fake://" + n
	}
	p := &provider{
		Cloud: &fake.Cloud{
			EnableInstancesV2:  true,
			ExistsByProviderID: true,
			ProviderID:         ids,
			Addresses:          []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}},
			Provider:           ProviderName,
			RequestDelay:       cfg.Latency.Duration,
		},
		limiter:       rate.NewLimiter(rate.Inf, 1),
		byOp:          map[string]int64{},
		throttledByOp: map[string]int64{},
		loadBalancers: cfg.LoadBalancers,
		routesOn:      cfg.Routes,
		routes:        map[string]map[string]*cloudprovider.Route{},
		hangPrefix:    cfg.HangPrefix,
		hangKind:      cfg.HangKind,
		hungObjects:   map[string]bool{},
		lbs:           map[string]balancer{},
		backends:      map[string]int64{},
	}
	if cfg.RateLimit > 0 {
		p.limiter = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, int(cfg.RateLimit)))
	}
	if cfg.Stats != "" {
		ln, err := net.Listen("tcp", cfg.Stats)
		if err != nil {
			return nil, fmt.Errorf("serving the upstream-fake call counts: %w", err)
		}
		go func() { _ = http.Serve(ln, p) }()
	}
	return p, nil
}

// provider is the fake with only its InstancesV2 offered, behind the
// cloud's limit and count.
type provider struct {
	*fake.Cloud
	limiter *rate.Limiter

	loadBalancers bool
	routesOn      bool
	hangPrefix    string
	hangKind      string

	mu sync.Mutex
	// hung are the calls hung now; hungObjects the Services and nodes
	// hung on.
	hung        int64
	hungObjects map[string]bool
	total       int64
	throttled   int64
	byOp        map[string]int64
	// throttledByOp are the refused calls by operation.
	throttledByOp map[string]int64
	// The load balancers, by name; how many have each backend set; the
	// accepted backend writes; the addresses handed out.
	lbs           map[string]balancer
	backends      map[string]int64
	backendWrites int64
	nextIP        int
	// routes are the routes by cluster name, then by routeKey.
	routes map[string]map[string]*cloudprovider.Route
}

func (p *provider) Instances() (cloudprovider.Instances, bool)     { return nil, false }
func (p *provider) InstancesV2() (cloudprovider.InstancesV2, bool) { return p, true }
func (p *provider) Routes() (cloudprovider.Routes, bool) {
	if !p.routesOn {
		return nil, false
	}
	return routeTable{p}, true
}
func (p *provider) Zones() (cloudprovider.Zones, bool)       { return nil, false }
func (p *provider) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// admit counts a call and tells whether the cloud's rate lets it through.
func (p *provider) admit(op string) error {
	ok := p.limiter.Allow()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total++
	p.byOp[op]++
	if !ok {
		p.throttled++
		p.throttledByOp[op]++
		return cloudproviderapi.NewRetryError("rate limit exceeded", time.Second)
	}
	return nil
}

func (p *provider) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	if err := p.admit("InstanceExists"); err != nil {
		return false, err
	}
	return p.Cloud.InstanceExists(ctx, node)
}

func (p *provider) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	if err := p.admit("InstanceShutdown"); err != nil {
		return false, err
	}
	return p.Cloud.InstanceShutdown(ctx, node)
}

func (p *provider) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := p.admit("InstanceMetadata"); err != nil {
		return nil, err
	}
	p.hangOn("node/" + node.Name)
	return p.Cloud.InstanceMetadata(ctx, node)
}

// hangOn never returns, whatever the call's context says, when the
// object's name (after its kind/) starts with Config.HangPrefix and its
// kind is Config.HangKind (or that is empty).
func (p *provider) hangOn(object string) {
	kind, name, _ := strings.Cut(object, "/")
	if p.hangPrefix == "" || !strings.HasPrefix(name, p.hangPrefix) || (p.hangKind != "" && p.hangKind != kind) {
		return
	}
	p.mu.Lock()
	p.hung++
	p.hungObjects[object] = true
	p.mu.Unlock()
	select {}
}

// counts are the call counts so far.
func (p *provider) counts() Calls {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Calls{Total: p.total, Throttled: p.throttled, ByOp: maps.Clone(p.byOp), ThrottledByOp: maps.Clone(p.throttledByOp), BackendWrites: p.backendWrites, Hung: p.hung, HungObjects: int64(len(p.hungObjects))}
	if len(p.backends) > 0 {
		c.Backends = maps.Clone(p.backends)
	}
	return c
}

// ServeHTTP answers the call counts.
func (p *provider) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p.counts())
}

// Read fetches the call counts served at addr.
func Read(ctx context.Context, addr string) (Calls, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return Calls{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Calls{}, fmt.Errorf("reading the upstream-fake call counts: %w", err)
	}
	defer resp.Body.Close()
	var c Calls
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return Calls{}, fmt.Errorf("decoding the upstream-fake call counts: %w", err)
	}
	return c, nil
}

// WriteConfig writes cfg to path as the provider's cloud-config, with a
// free loopback port for Stats, and returns that address. The provider
// lives in the CCM's process: the counts are read there, with Read.
func WriteConfig(path string, cfg Config) (stats string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	cfg.Stats = ln.Addr().String()
	_ = ln.Close()
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return "", err
	}
	return cfg.Stats, nil
}

// Counter reads the counts served at addr. Before the CCM built its
// provider, and after it stopped, there is nothing to read: no calls. A
// CCM that keeps the machine's cores busy can make a read time out: it is
// tried again for up to 30 s, and then the last counts read stand in (the
// counts only grow), with a warning, rather than zeros that would make a
// phase's differences negative.
func Counter(ctx context.Context, addr string) func() Calls {
	var last Calls
	return func() Calls {
		deadline := time.Now().Add(30 * time.Second)
		for {
			readCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := Read(readCtx, addr)
			cancel()
			if err == nil {
				last = c
				return c
			}
			if errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil || time.Now().After(deadline) {
				if last.Total > 0 && !errors.Is(err, syscall.ECONNREFUSED) {
					fmt.Fprintf(os.Stderr, "upstream-fake: %v; the counts read last stand in\n", err)
					return last
				}
				return Calls{}
			}
			time.Sleep(time.Second)
		}
	}
}
