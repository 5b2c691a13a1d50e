package local

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// The provider's load balancers in two parts. The allocator (this file and
// vips.go) keeps the books: which load balancers exist, by name, and the
// VIP each was given from the pool. The data plane (balancer.go, proxy.go,
// health.go) serves them: with the proxy data plane, TCP and UDP proxies
// on each VIP forwarding to the healthy backend nodes; with the nodes data
// plane, nothing here (the nodes serve the VIPs).

// balancers is the provider's cloudprovider.LoadBalancer: every load
// balancer of this process, by name, and the VIP pool.
type balancers struct {
	s      settings
	prober *prober
	vips   *vipPool

	mu     sync.Mutex
	byName map[string]*balancer
}

var _ cloudprovider.LoadBalancer = (*balancers)(nil)

func newBalancers(s settings) *balancers {
	return &balancers{s: s, prober: newProber(s), vips: newVIPPool(s.pool), byName: map[string]*balancer{}}
}

// GetLoadBalancerName is upstream's default, so names carry over between
// CCMs.
func (bs *balancers) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer implements cloudprovider.LoadBalancer.
func (bs *balancers) GetLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.byName[bs.GetLoadBalancerName(ctx, cluster, svc)]
	if !ok {
		return nil, false, nil
	}
	return b.status(), true, nil
}

// EnsureLoadBalancer creates the load balancer or brings it in line with
// svc: ports added or removed take effect live, on the same VIP.
func (bs *balancers) EnsureLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	cfg, err := configFor(svc, bs.s.dataPlane == DataPlaneProxy)
	if err != nil {
		return nil, err
	}
	name := bs.GetLoadBalancerName(ctx, cluster, svc)
	if err := bs.vips.waitHeld(ctx); err != nil {
		return nil, err
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, exists := bs.byName[name]
	var current netip.Addr
	if exists {
		current = b.vip
	}
	vip, err := bs.vips.assign(name, current, svc)
	if err != nil {
		return nil, err
	}
	if !exists {
		b = newBalancer(name, svc.Namespace+"/"+svc.Name, bs.s, bs.prober)
		bs.byName[name] = b
	}
	if b.vip != vip {
		if b.vip.IsValid() {
			b.closeListeners() // rebound on the new VIP below
		}
		b.vip = vip
	}
	b.setConfig(cfg)
	if bs.s.dataPlane == DataPlaneProxy {
		b.setBackends(nodes)
		if err := b.syncListeners(cfg.ports); err != nil {
			return nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("Local load balancer ensured", "name", name, "vip", vip, "ports", len(cfg.ports), "backends", len(nodes))
	return b.status(), nil
}

// UpdateLoadBalancer replaces the backends.
func (bs *balancers) UpdateLoadBalancer(ctx context.Context, cluster string, svc *corev1.Service, nodes []*corev1.Node) error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.byName[bs.GetLoadBalancerName(ctx, cluster, svc)]
	if !ok {
		return fmt.Errorf("load balancer of %s/%s does not exist", svc.Namespace, svc.Name)
	}
	if bs.s.dataPlane == DataPlaneProxy {
		b.setBackends(nodes)
	}
	return nil
}

// EnsureLoadBalancerDeleted stops the proxies and frees the VIP.
func (bs *balancers) EnsureLoadBalancerDeleted(ctx context.Context, cluster string, svc *corev1.Service) error {
	name := bs.GetLoadBalancerName(ctx, cluster, svc)
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.byName[name]
	if !ok {
		return nil
	}
	b.closeListeners()
	b.setBackends(nil)
	bs.vips.release(b.vip)
	delete(bs.byName, name)
	return nil
}

func (bs *balancers) closeAll() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.byName {
		b.closeListeners()
	}
	bs.prober.stop()
}

// lbConfig is what a Service asks of its load balancer.
type lbConfig struct {
	ports      []corev1.ServicePort
	ranges     []netip.Prefix
	affinity   time.Duration // 0: none
	healthPort int32         // 0: kube-proxy's
	// proxyProtocol: each TCP connection to a backend starts with a
	// PROXY protocol v2 header (AnnotationProxyProtocol).
	proxyProtocol bool
}

// configFor reads svc. Only the proxy data plane needs node ports (it
// forwards to them), and only it can send PROXY protocol headers; with the
// nodes data plane kube-proxy takes VIP traffic itself (ipMode VIP), so
// allocateLoadBalancerNodePorts: false works.
func configFor(svc *corev1.Service, needNodePorts bool) (lbConfig, error) {
	var cfg lbConfig
	for _, p := range svc.Spec.Ports {
		if p.Protocol != corev1.ProtocolTCP && p.Protocol != corev1.ProtocolUDP {
			return cfg, provider.Reasonf(provider.ReasonInvalidSpec, "port %d: the local provider balances TCP and UDP, not %s", p.Port, p.Protocol)
		}
		if p.NodePort == 0 && needNodePorts {
			return cfg, provider.Reasonf(provider.ReasonInvalidSpec, "port %d has no nodePort (allocateLoadBalancerNodePorts: false needs the local provider's dataPlane: nodes)", p.Port)
		}
	}
	cfg.ports = svc.Spec.Ports
	ranges, err := servicehelpers.GetLoadBalancerSourceRanges(svc)
	if err != nil {
		return cfg, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s: %v", corev1.AnnotationLoadBalancerSourceRangesKey, err)
	}
	if !servicehelpers.IsAllowAll(ranges) {
		for _, r := range ranges.StringSlice() {
			p, err := netip.ParsePrefix(r)
			if err != nil {
				return cfg, provider.Reasonf(provider.ReasonInvalidSpec, "source range %q: %v", r, err)
			}
			cfg.ranges = append(cfg.ranges, p)
		}
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		cfg.affinity = 10800 * time.Second
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			cfg.affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	if servicehelpers.RequestsOnlyLocalTraffic(svc) {
		cfg.healthPort = svc.Spec.HealthCheckNodePort
	}
	if cfg.proxyProtocol, err = proxyProtocolOf(svc, needNodePorts); err != nil {
		return cfg, err
	}
	return cfg, nil
}
