package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// balancers is the provider's cloudprovider.LoadBalancer: every load
// balancer of this process, and the VIP pool.
type balancers struct {
	s      settings
	prober *prober

	mu     sync.Mutex
	byName map[string]*balancer
	vips   map[netip.Addr]string
	next   netip.Addr
	// held are the pool's addresses that Services' statuses hold, by the
	// Service's UID (SetInformers): a process that restarted, or a new
	// leader, has no load balancers yet, but an address a Service still
	// advertises is not free for another Service.
	held map[netip.Addr]types.UID
	// heldSynced is the Service handler's registration: allocation waits
	// until it has seen every Service once.
	heldSynced atomic.Pointer[cache.ResourceEventHandlerRegistration]
}

// waitHeld waits until the addresses Services hold are known (at once when
// no informer feeds them).
func (bs *balancers) waitHeld(ctx context.Context) error {
	reg := bs.heldSynced.Load()
	if reg == nil || (*reg).HasSynced() {
		return nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), (*reg).HasSynced) {
		return fmt.Errorf("waiting for the addresses Services hold: %w", context.Cause(ctx))
	}
	return nil
}

var _ cloudprovider.LoadBalancer = (*balancers)(nil)

func newBalancers(s settings) *balancers {
	return &balancers{s: s, prober: newProber(s), byName: map[string]*balancer{}, vips: map[netip.Addr]string{}, held: map[netip.Addr]types.UID{}}
}

// holdStatus records the pool addresses svc's status advertises, replacing
// what it held before; nil (deleted) releases them.
func (bs *balancers) holdStatus(uid types.UID, svc *corev1.Service) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for ip, holder := range bs.held {
		if holder == uid {
			delete(bs.held, ip)
		}
	}
	if svc == nil {
		return
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && bs.s.pool.Contains(ip) {
			bs.held[ip] = uid
		}
	}
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
	if err := bs.waitHeld(ctx); err != nil {
		return nil, err
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, exists := bs.byName[name]
	vip, err := bs.chooseVIP(name, b, svc)
	if err != nil {
		return nil, err
	}
	if !exists {
		b = &balancer{name: name, service: svc.Namespace + "/" + svc.Name, s: bs.s, prober: bs.prober, listeners: map[listenerKey]*listener{}, sticky: map[netip.Addr]stickyEntry{}}
		bs.byName[name] = b
	}
	if b.vip != vip {
		if b.vip.IsValid() {
			delete(bs.vips, b.vip)
			b.closeListeners() // rebound on the new VIP below
		}
		b.vip = vip
		bs.vips[vip] = name
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

// chooseVIP keeps a load balancer's VIP for life. A new one takes, in
// order: spec.loadBalancerIP; the address in the Service's status (so a
// restarted Outrigger keeps its VIPs); the next free address in the pool.
func (bs *balancers) chooseVIP(name string, b *balancer, svc *corev1.Service) (netip.Addr, error) {
	free := func(ip netip.Addr) bool {
		if holder, held := bs.held[ip]; held && holder != svc.UID {
			return false
		}
		owner, used := bs.vips[ip]
		return !used || owner == name
	}
	if req := svc.Spec.LoadBalancerIP; req != "" {
		ip, err := netip.ParseAddr(req)
		if err != nil || !bs.s.pool.Contains(ip) {
			return netip.Addr{}, provider.Reasonf("LoadBalancerIPNotAvailable", "spec.loadBalancerIP %s is not in the pool %s", req, bs.s.pool)
		}
		if !free(ip) {
			return netip.Addr{}, provider.Reasonf("LoadBalancerIPNotAvailable", "spec.loadBalancerIP %s is in use by another Service", req)
		}
		return ip, nil
	}
	if b != nil && b.vip.IsValid() {
		return b.vip, nil
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && bs.s.pool.Contains(ip) && free(ip) {
			return ip, nil
		}
	}
	first := bs.s.pool.Addr().Next() // not the network address
	ip := bs.next
	if !ip.IsValid() {
		ip = first
	}
	size := 1 << min(24, ip.BitLen()-bs.s.pool.Bits())
	for range size {
		if !bs.s.pool.Contains(ip) {
			ip = first
		}
		if free(ip) {
			bs.next = ip.Next()
			return ip, nil
		}
		ip = ip.Next()
	}
	return netip.Addr{}, provider.Reasonf(provider.ReasonQuotaExceeded, "the VIP pool %s is exhausted (%d load balancers)", bs.s.pool, len(bs.vips))
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
	delete(bs.vips, b.vip)
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
}

// configFor reads svc. Only the proxy data plane needs node ports (it
// forwards to them); with the nodes data plane kube-proxy takes VIP
// traffic itself (ipMode VIP), so allocateLoadBalancerNodePorts: false works.
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
	return cfg, nil
}

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

// listener serves one port of the VIP.
type listener struct {
	close func()
}

func (b *balancer) listen(k listenerKey) (*listener, error) {
	addr := netip.AddrPortFrom(b.vip, uint16(k.port)).String()
	switch k.protocol {
	case corev1.ProtocolTCP:
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on TCP %s: %w", addr, err)
		}
		t := &tcpProxy{b: b, key: k, ln: ln, conns: map[net.Conn]struct{}{}}
		go t.serve()
		return &listener{close: t.close}, nil
	default:
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on UDP %s: %w", addr, err)
		}
		u := &udpProxy{b: b, key: k, conn: pc.(*net.UDPConn), flows: map[netip.AddrPort]*udpFlow{}}
		go u.serve()
		return &listener{close: u.close}, nil
	}
}

// tcpProxy accepts on the VIP and splices each connection to a backend.
type tcpProxy struct {
	b   *balancer
	key listenerKey
	ln  net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (t *tcpProxy) serve() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go t.handle(c)
	}
}

func (t *tcpProxy) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if add {
		if t.closed {
			return false
		}
		t.conns[c] = struct{}{}
	} else {
		delete(t.conns, c)
	}
	return true
}

func (t *tcpProxy) handle(c net.Conn) {
	defer c.Close()
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	if !t.b.allowed(client) {
		return // outside loadBalancerSourceRanges: refused
	}
	nodePort, ok := t.b.nodePort(t.key)
	if !ok {
		return
	}
	upstream := t.dial(client, nodePort)
	if upstream == nil {
		return
	}
	defer upstream.Close()
	if !t.track(c, true) {
		return
	}
	defer t.track(c, false)
	done := make(chan struct{}, 2)
	splice := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go splice(upstream, c)
	go splice(c, upstream)
	<-done
	<-done
}

// dial connects a new client to a backend: up to three backends in turn,
// and while none accepts (a Service just provisioned: its nodes' ports open
// a moment after its address is published), again with backoff for up to
// connectWait, the client held meanwhile rather than reset. Nil: none
// accepted in time.
func (t *tcpProxy) dial(client netip.Addr, nodePort int32) net.Conn {
	deadline := time.Now().Add(t.b.s.connectWait)
	wait := 50 * time.Millisecond
	for {
		var tried []backend
		for range 3 {
			be, ok := t.b.pick(client, tried)
			if !ok {
				break
			}
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(be.ip, uint16(nodePort)).String(), t.b.s.dialTimeout)
			if err == nil {
				return c
			}
			t.b.dialFailures.Add(1)
			tried = append(tried, be)
		}
		if time.Now().Add(wait).After(deadline) {
			return nil
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

func (t *tcpProxy) close() {
	_ = t.ln.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		_ = c.Close()
	}
}

// udpProxy relays datagrams: each client address is a flow with its own
// socket to the backend it was given, ended after the idle timeout.
type udpProxy struct {
	b    *balancer
	key  listenerKey
	conn *net.UDPConn

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

type udpFlow struct {
	upstream *net.UDPConn
	last     atomic.Int64 // unix nanos of the last packet either way
}

func (u *udpProxy) serve() {
	buf := make([]byte, 64*1024)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !u.b.allowed(client.Addr()) {
			continue
		}
		f := u.flow(client)
		if f == nil {
			continue
		}
		f.last.Store(time.Now().UnixNano())
		_, _ = f.upstream.Write(buf[:n])
	}
}

func (u *udpProxy) flow(client netip.AddrPort) *udpFlow {
	u.mu.Lock()
	defer u.mu.Unlock()
	if f, ok := u.flows[client]; ok {
		return f
	}
	if len(u.flows) >= maxUDPFlows {
		return nil
	}
	nodePort, ok := u.b.nodePort(u.key)
	if !ok {
		return nil
	}
	be, ok := u.b.pick(client.Addr(), nil)
	if !ok {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(be.ip, uint16(nodePort))))
	if err != nil {
		return nil
	}
	f := &udpFlow{upstream: up}
	f.last.Store(time.Now().UnixNano())
	u.flows[client] = f
	go u.relayReplies(client, f)
	return f
}

func (u *udpProxy) relayReplies(client netip.AddrPort, f *udpFlow) {
	defer func() {
		u.mu.Lock()
		delete(u.flows, client)
		u.mu.Unlock()
		_ = f.upstream.Close()
	}()
	buf := make([]byte, 64*1024)
	for {
		_ = f.upstream.SetReadDeadline(time.Now().Add(u.b.s.udpIdle))
		n, err := f.upstream.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, f.last.Load())) < u.b.s.udpIdle {
				continue
			}
			return
		}
		f.last.Store(time.Now().UnixNano())
		if _, err := u.conn.WriteToUDPAddrPort(buf[:n], client); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

func (u *udpProxy) close() {
	_ = u.conn.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range u.flows {
		_ = f.upstream.Close()
	}
}
