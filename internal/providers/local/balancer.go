package local

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// balancer is one load balancer: a VIP, a listener per Service port, and
// the backends they forward to.
type balancer struct {
	name    string
	service string
	s       settings
	prober  *prober
	vip     netip.Addr

	mu        sync.Mutex
	cfg       lbConfig
	backends  []backend
	targets   []target // acquired from the prober
	listeners map[listenerKey]*listener
	sticky    map[netip.Addr]stickyEntry
	rr        atomic.Uint64
	// dialFailures counts connections to backends that failed.
	dialFailures atomic.Int64
}

func newBalancer(name, service string, s settings, p *prober) *balancer {
	return &balancer{name: name, service: service, s: s, prober: p, listeners: map[listenerKey]*listener{}, sticky: map[netip.Addr]stickyEntry{}}
}

type backend struct {
	node string
	ip   netip.Addr
}

type stickyEntry struct {
	backend backend
	expires time.Time
}

// Per-client state is bounded, whoever sends: a client (or a spoofer of
// many source addresses) cannot grow the process without limit.
const (
	// maxStickyClients bounds a load balancer's ClientIP affinity
	// entries. At the bound expired entries go first, then arbitrary
	// ones: those clients' next connections may reach another backend.
	maxStickyClients = 1 << 16
	// maxUDPFlows bounds a UDP listener's flows, each a socket: at the
	// bound a datagram of a new client is dropped, as a full conntrack
	// table drops it, until a flow ends (after udpIdleTimeout).
	maxUDPFlows = 4096
)

type listenerKey struct {
	protocol corev1.Protocol
	port     int32
}

func (b *balancer) status() *corev1.LoadBalancerStatus {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: b.vip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}}
}

func (b *balancer) setConfig(cfg lbConfig) {
	b.mu.Lock()
	defer b.mu.Unlock()
	healthChanged := b.cfg.healthPort != cfg.healthPort
	b.cfg = cfg
	if cfg.affinity == 0 {
		clear(b.sticky)
	}
	if healthChanged {
		b.retargetLocked()
	}
}

// setBackends replaces the backends with the nodes' first InternalIP (an
// ExternalIP when a node has none).
func (b *balancer) setBackends(nodes []*corev1.Node) {
	var out []backend
	for _, n := range nodes {
		if ip, ok := nodeIP(n); ok {
			out = append(out, backend{node: n.Name, ip: ip})
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = out
	b.retargetLocked()
}

// retargetLocked points the health checks at the current backends.
func (b *balancer) retargetLocked() {
	port := b.cfg.healthPort
	if port == 0 {
		port = b.s.kubeProxyPort
	}
	var next []target
	for _, be := range b.backends {
		t := target{be.ip, port}
		next = append(next, t)
		b.prober.acquire(t)
	}
	for _, t := range b.targets {
		b.prober.release(t)
	}
	b.targets = next
}

func nodeIP(n *corev1.Node) (netip.Addr, bool) {
	for _, want := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == want {
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					return ip, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

// sendsProxyProtocol says whether a new TCP connection to a backend starts
// with a PROXY protocol header.
func (b *balancer) sendsProxyProtocol() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg.proxyProtocol
}

// allowed applies loadBalancerSourceRanges.
func (b *balancer) allowed(client netip.Addr) bool {
	b.mu.Lock()
	ranges := b.cfg.ranges
	b.mu.Unlock()
	if len(ranges) == 0 {
		return true
	}
	client = client.Unmap()
	for _, r := range ranges {
		if r.Contains(client) {
			return true
		}
	}
	return false
}

// pick chooses a backend for a new connection or flow from client: the
// client's sticky backend while it is healthy (ClientIP affinity), else the
// next healthy one round-robin. skip lists backends that just failed to
// connect. When every backend fails its health check all are used: better
// a chance than certain failure.
func (b *balancer) pick(client netip.Addr, skip []backend) (backend, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	port := b.cfg.healthPort
	if port == 0 {
		port = b.s.kubeProxyPort
	}
	var healthy, usable []backend
	for _, be := range b.backends {
		if slices.Contains(skip, be) {
			continue
		}
		usable = append(usable, be)
		if b.prober.healthy(target{be.ip, port}) {
			healthy = append(healthy, be)
		}
	}
	if len(healthy) == 0 {
		healthy = usable
	}
	if len(healthy) == 0 {
		return backend{}, false
	}
	now := time.Now()
	if b.cfg.affinity > 0 {
		if e, ok := b.sticky[client]; ok && now.Before(e.expires) && slices.Contains(healthy, e.backend) {
			b.sticky[client] = stickyEntry{e.backend, now.Add(b.cfg.affinity)}
			return e.backend, true
		}
	}
	be := healthy[int(b.rr.Add(1)-1)%len(healthy)]
	if b.cfg.affinity > 0 {
		if len(b.sticky) >= maxStickyClients {
			b.evictStickyLocked(now)
		}
		b.sticky[client] = stickyEntry{be, now.Add(b.cfg.affinity)}
	}
	return be, true
}

// evictStickyLocked makes room for affinity entries: the expired ones go
// or, when too few had expired, a sixteenth of the entries, arbitrary ones,
// so that the scan is paid once per many new clients, not once each.
func (b *balancer) evictStickyLocked(now time.Time) {
	for c, e := range b.sticky {
		if !now.Before(e.expires) {
			delete(b.sticky, c)
		}
	}
	excess := len(b.sticky) - (maxStickyClients - maxStickyClients/16)
	for c := range b.sticky {
		if excess <= 0 {
			return
		}
		delete(b.sticky, c)
		excess--
	}
}

// nodePort returns where a listener's traffic goes on the backends now.
func (b *balancer) nodePort(k listenerKey) (int32, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.cfg.ports {
		if p.Protocol == k.protocol && p.Port == k.port {
			return p.NodePort, true
		}
	}
	return 0, false
}

// syncListeners opens a listener for every port not yet served and closes
// those of ports removed. A node port change needs nothing: listeners look
// the node port up per connection.
func (b *balancer) syncListeners(ports []corev1.ServicePort) error {
	want := map[listenerKey]bool{}
	var errs []error
	for _, p := range ports {
		k := listenerKey{p.Protocol, p.Port}
		want[k] = true
		b.mu.Lock()
		_, ok := b.listeners[k]
		b.mu.Unlock()
		if ok {
			continue
		}
		l, err := b.listen(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.mu.Lock()
		b.listeners[k] = l
		b.mu.Unlock()
	}
	b.mu.Lock()
	for k, l := range b.listeners {
		if !want[k] {
			l.close()
			delete(b.listeners, k)
		}
	}
	b.mu.Unlock()
	if len(errs) > 0 {
		return provider.WithReason("PortUnavailable", fmt.Errorf("load balancer %s on %s: %w", b.name, b.vip, errors.Join(errs...)))
	}
	return nil
}

func (b *balancer) closeListeners() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, l := range b.listeners {
		l.close()
		delete(b.listeners, k)
	}
}
