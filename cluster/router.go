package cluster

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// KubeProxyHealthzPort is where every node's kube-proxy answers /healthz
// (healthzBindAddress): a load balancer's health check for
// externalTrafficPolicy: Cluster, as upstream's service controller
// documents for cloud load balancers.
const KubeProxyHealthzPort = 10256

// The router plays the cloud network's part for the local provider's VIPs
// with dataPlane: nodes. As a cloud's pass-through network load balancer
// does (GCE's, AWS's NLB with instance targets), it forwards a VIP's
// packets unchanged to the nodes whose health check passes, and kube-proxy
// there takes them (ingress ipMode VIP): for externalTrafficPolicy: Local
// the Service's healthCheckNodePort, which answers 200 only on nodes with a
// ready local endpoint; for Cluster kube-proxy's own /healthz. The
// forwarding is a route per VIP in the router namespace, between the
// harness and the nodes, with one next hop per healthy node (ECMP, every
// packet hashed on its addresses, protocol and ports: setupRouterNetns), so
// every node with endpoints gets traffic, which upstream's e2e load
// balancer tests require ("should target all nodes with endpoints").
//
// A VIP goes only to its own cloud's machines: a local VIP (in a
// LoadBalancer Service's status) to the local cloud's nodes; in a hybrid
// cluster, a sim VIP to the nodes its sim load balancer lists as backends,
// health-checked as the load balancer says (its healthCheckPort, set for
// externalTrafficPolicy: Local, or kube-proxy's /healthz).
type router struct {
	client kubernetes.Interface
	nodes  []node
	// simLBs lists the sim cloud's load balancers; nil: no sim cloud.
	simLBs   func() []simcloud.LoadBalancer
	interval time.Duration
	// healthzPort is kube-proxy's (KubeProxyHealthzPort).
	healthzPort int
	// probe reaches node IPs from the harness namespace.
	probe *http.Client
	// setRoute programs vip's next hops (none: no route).
	setRoute func(ctx context.Context, vip netip.Addr, hops []string) error

	// log receives each route change and each failed check (nil: none).
	log io.Writer

	mu sync.Mutex
	// routes are the next hops programmed per VIP.
	routes map[netip.Addr][]string
	// health is each checked URL's state across passes.
	health map[string]*checkState
}

// failThreshold is how many checks in a row must fail before a node that
// passed leaves a VIP's next hops. As a cloud load balancer's unhealthy
// threshold (GCE's and AWS's default to 2 or more), it keeps one slow answer
// (a node's kube-proxy busy, the harness under load) from moving the VIP's
// flows: leaving the ECMP route re-hashes every flow of the VIP, and an
// established connection landing on another node, which has no conntrack
// entry for it, hangs until the client gives up.
const failThreshold = 3

// checkState is one health check URL's verdict and its failures in a row.
type checkState struct {
	up    bool
	fails int
}

// Routes returns the next hops (node IPs) the harness routes each VIP to.
func (c *Cluster) Routes() map[netip.Addr][]string {
	if c.router == nil {
		return nil
	}
	c.router.mu.Lock()
	defer c.router.mu.Unlock()
	return maps.Clone(c.router.routes)
}

func (c *Cluster) startRouter(context.Context) error {
	if err := os.MkdirAll(c.opts.LogDir, 0o755); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(c.opts.LogDir, "router.log"))
	if err != nil {
		return err
	}
	r := &router{
		client:      c.Client,
		nodes:       c.nodes,
		interval:    time.Second,
		healthzPort: KubeProxyHealthzPort,
		probe: &http.Client{
			Timeout: time.Second,
			Transport: &http.Transport{
				DisableKeepAlives: true,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, addr)
				},
			},
		},
		setRoute: setVIPRoute,
		routes:   map[netip.Addr][]string{},
		log:      log,
	}
	if c.sim != nil {
		r.simLBs = c.sim.LoadBalancers
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	c.router = r
	c.stopRouter = func() {
		cancel()
		<-done
		_ = log.Close()
	}
	return nil
}

// run syncs the routes every interval until ctx ends. The router
// namespace, and the routes with it, go when the cluster stops.
func (r *router) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		r.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *router) sync(ctx context.Context) {
	svcs, err := r.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server restarting: keep the routes as they are
	}
	desired := r.desired(ctx, svcs.Items)
	r.mu.Lock()
	defer r.mu.Unlock()
	for vip, hops := range desired {
		if slices.Equal(r.routes[vip], hops) {
			continue
		}
		err := r.setRoute(ctx, vip, hops)
		r.logf("VIP %s: next hops %v -> %v: %v", vip, r.routes[vip], hops, errOrOK(err))
		if err == nil {
			r.routes[vip] = hops
		}
	}
	for vip := range r.routes {
		if _, ok := desired[vip]; !ok {
			err := r.setRoute(ctx, vip, nil)
			r.logf("VIP %s: next hops %v -> none: %v", vip, r.routes[vip], errOrOK(err))
			if err == nil {
				delete(r.routes, vip)
			}
		}
	}
}

func (r *router) logf(format string, args ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "%s "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339Nano)}, args...)...)
	}
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// desired is, per VIP of the local pool in a LoadBalancer Service's status
// and per sim load balancer, the IPs of its cloud's nodes (a sim load
// balancer's backends) whose health check for it passes, in node order.
func (r *router) desired(ctx context.Context, svcs []corev1.Service) map[netip.Addr][]string {
	probed := map[string]bool{} // one probe per URL per pass
	healthy := func(url string) bool {
		if ok, seen := probed[url]; seen {
			return ok
		}
		ok := r.verdict(url, r.check(ctx, url))
		probed[url] = ok
		return ok
	}
	// A URL no longer checked (its Service or node gone) starts afresh.
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for url := range r.health {
			if _, ok := probed[url]; !ok {
				delete(r.health, url)
			}
		}
	}()
	out := map[netip.Addr][]string{}
	pool := netip.MustParsePrefix(VIPPool)
	for _, svc := range svcs {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			vip, err := netip.ParseAddr(ing.IP)
			if err != nil || !pool.Contains(vip) {
				continue
			}
			var hops []string
			for _, n := range r.nodes {
				if n.Platform == PlatformLocal && healthy(healthCheckURL(&svc, n.IP, r.healthzPort)) {
					hops = append(hops, n.IP)
				}
			}
			out[vip] = affine(svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP, vip, hops)
		}
	}
	if r.simLBs == nil {
		return out
	}
	simPool := netip.MustParsePrefix(SimVIPPool)
	for _, lb := range r.simLBs() {
		vip, err := netip.ParseAddr(lb.VIP)
		if err != nil || !simPool.Contains(vip) {
			continue
		}
		backends := map[string]bool{}
		for _, b := range lb.Backends {
			backends[b.Address] = true
		}
		var hops []string
		for _, n := range r.nodes {
			if n.Platform == PlatformSim && backends[n.IP] && healthy(healthURL(n.IP, int(lb.HealthCheckPort), r.healthzPort)) {
				hops = append(hops, n.IP)
			}
		}
		out[vip] = affine(lb.SessionAffinity == string(corev1.ServiceAffinityClientIP), vip, hops)
	}
	return out
}

// affine keeps a Service with sessionAffinity: ClientIP on one node per
// client, as a cloud load balancer with client-IP affinity does: kube-proxy
// keeps affinity per node, so a client spread over nodes by its flows'
// ports would reach different endpoints. The harness is the only client, so
// that is one node per VIP, picked by a hash of the VIP among the healthy
// ones (the spread over endpoints is then kube-proxy's).
func affine(clientIP bool, vip netip.Addr, hops []string) []string {
	if !clientIP || len(hops) < 2 {
		return hops
	}
	h := fnv.New32a()
	h.Write(vip.AsSlice())
	return []string{hops[h.Sum32()%uint32(len(hops))]}
}

// healthCheckURL is what a cloud load balancer checks on a node for svc.
func healthCheckURL(svc *corev1.Service, nodeIP string, healthzPort int) string {
	port := 0
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		port = int(svc.Spec.HealthCheckNodePort)
	}
	return healthURL(nodeIP, port, healthzPort)
}

// healthURL is a node's health check: port's / (a Service's
// healthCheckNodePort), or with port 0 kube-proxy's /healthz.
func healthURL(nodeIP string, port, healthzPort int) string {
	if port != 0 {
		return fmt.Sprintf("http://%s/", net.JoinHostPort(nodeIP, fmt.Sprint(port)))
	}
	return fmt.Sprintf("http://%s/healthz", net.JoinHostPort(nodeIP, fmt.Sprint(healthzPort)))
}

// verdict is url's health after a check that failed (err) or passed: a
// URL that never passed is down until it passes; one that passed stays up
// until failThreshold checks in a row fail.
func (r *router) verdict(url string, err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.health == nil {
		r.health = map[string]*checkState{}
	}
	st := r.health[url]
	if st == nil {
		st = &checkState{}
		r.health[url] = st
	}
	if err == nil {
		st.up, st.fails = true, 0
		return true
	}
	st.fails++
	if st.up {
		r.logf("check %s failed (%d in a row of %d): %v", url, st.fails, failThreshold, err)
	}
	if st.fails >= failThreshold {
		st.up = false
	}
	return st.up
}

// check probes url once: nil when it answers 200.
func (r *router) check(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := r.probe.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// setVIPRoute routes vip in the router namespace through hops, one ECMP
// next hop each, or removes its route when there are none (then the pool's
// sink swallows it).
func setVIPRoute(ctx context.Context, vip netip.Addr, hops []string) error {
	dst := vip.String() + "/32"
	if len(hops) == 0 {
		err := run(ctx, "ip", "-n", routerNS, "route", "del", dst)
		if err != nil && strings.Contains(err.Error(), "No such process") {
			return nil // already gone
		}
		return err
	}
	args := []string{"-n", routerNS, "route", "replace", dst}
	for _, h := range hops {
		args = append(args, "nexthop", "via", h, "dev", "eth0")
	}
	return run(ctx, "ip", args...)
}
