package cluster

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testobj"
)

// serveHealth answers GET on ip:port with status, standing for kube-proxy's
// health servers on a node.
func serveHealth(t *testing.T, ip string, port, status int) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func lbService(name string, etp corev1.ServiceExternalTrafficPolicy, hcPort int32, ingress ...string) *corev1.Service {
	return testobj.LBService("default", name, testobj.TrafficPolicy(etp), testobj.HealthCheckNodePort(hcPort), testobj.Ingress(ingress...))
}

// The router forwards each VIP of the pool to the nodes whose health check
// for its Service passes, and removes the route of a VIP that is gone.
func TestRouter(t *testing.T) {
	// Node 1 has a ready local endpoint for the Local Service; node 2 has
	// not (kube-proxy answers 503 on the health check node port). Both
	// kube-proxies are healthy.
	n1, n2 := "127.0.0.1", "127.0.0.2"
	healthz := serveHealth(t, n1, 0, http.StatusOK)
	serveHealth(t, n2, healthz, http.StatusOK)
	hcPort := serveHealth(t, n1, 0, http.StatusOK)
	serveHealth(t, n2, hcPort, http.StatusServiceUnavailable)

	affinity := lbService("affinity", corev1.ServiceExternalTrafficPolicyCluster, 0, "198.18.100.3")
	affinity.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	client := fake.NewClientset(
		lbService("cluster", corev1.ServiceExternalTrafficPolicyCluster, 0, "198.18.100.1"),
		lbService("local", corev1.ServiceExternalTrafficPolicyLocal, int32(hcPort), "198.18.100.2"),
		lbService("pending", corev1.ServiceExternalTrafficPolicyCluster, 0),
		lbService("not-ours", corev1.ServiceExternalTrafficPolicyCluster, 0, "198.18.200.1"),
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "clusterip", Namespace: "default"}},
		affinity,
	)
	programmed := map[netip.Addr][]string{}
	r := &router{
		client:      client,
		nodes:       []node{{Name: "n1", IP: n1, Platform: PlatformLocal}, {Name: "n2", IP: n2, Platform: PlatformLocal}},
		healthzPort: healthz,
		probe:       &http.Client{},
		setRoute: func(_ context.Context, vip netip.Addr, hops []string) error {
			if hops == nil {
				delete(programmed, vip)
			} else {
				programmed[vip] = hops
			}
			return nil
		},
		routes: map[netip.Addr][]string{},
	}
	ctx := context.Background()
	r.sync(ctx)
	want := map[netip.Addr][]string{
		netip.MustParseAddr("198.18.100.1"): {n1, n2}, // Cluster: every healthy kube-proxy
		netip.MustParseAddr("198.18.100.2"): {n1},     // Local: the node with the endpoint
	}
	for vip, hops := range want {
		if !slices.Equal(programmed[vip], hops) || !slices.Equal(r.routes[vip], hops) {
			t.Errorf("VIP %s: programmed %v, recorded %v, want %v", vip, programmed[vip], r.routes[vip], hops)
		}
	}
	// Client-IP affinity: one node (kube-proxy keeps affinity per node).
	if hops := programmed[netip.MustParseAddr("198.18.100.3")]; len(hops) != 1 || (hops[0] != n1 && hops[0] != n2) {
		t.Errorf("the ClientIP-affinity VIP is routed to %v, want one healthy node", hops)
	}
	if len(programmed) != len(want)+1 {
		t.Errorf("programmed %v, want only %v", programmed, want)
	}

	if err := client.CoreV1().Services("default").Delete(ctx, "local", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.sync(ctx)
	if _, ok := programmed[netip.MustParseAddr("198.18.100.2")]; ok {
		t.Errorf("the deleted Service's VIP is still routed: %v", programmed)
	}
	if _, ok := r.routes[netip.MustParseAddr("198.18.100.2")]; ok {
		t.Errorf("the deleted Service's VIP is still recorded: %v", r.routes)
	}
}

// In a hybrid cluster each cloud's VIPs go to its own machines only: a local
// VIP to the local nodes, a sim VIP to the sim nodes its load balancer lists
// as backends, health-checked on the load balancer's healthCheckPort (or
// kube-proxy's /healthz without one).
func TestRouterHybrid(t *testing.T) {
	// n1 is the local cloud's machine; n2 and n3 the sim cloud's. Every
	// kube-proxy is healthy; on the Local Service's health check node port
	// only n3 has an endpoint.
	n1, n2, n3 := "127.0.0.1", "127.0.0.2", "127.0.0.3"
	healthz := serveHealth(t, n1, 0, http.StatusOK)
	serveHealth(t, n2, healthz, http.StatusOK)
	serveHealth(t, n3, healthz, http.StatusOK)
	hcPort := serveHealth(t, n1, 0, http.StatusOK)
	serveHealth(t, n2, hcPort, http.StatusServiceUnavailable)
	serveHealth(t, n3, hcPort, http.StatusOK)

	client := fake.NewClientset(
		lbService("local", corev1.ServiceExternalTrafficPolicyCluster, 0, "198.18.100.1"),
		// A sim VIP in a Service's status is routed from the sim
		// cloud's record, not from the Service.
		lbService("sim", corev1.ServiceExternalTrafficPolicyCluster, 0, "198.18.128.1"),
	)
	lbs := []simcloud.LoadBalancer{
		{Name: "cluster", VIP: "198.18.128.1", LoadBalancerSpec: simcloud.LoadBalancerSpec{
			Backends: []simcloud.Backend{{Node: "n2", Address: n2}}}},
		{Name: "local", VIP: "198.18.128.2", LoadBalancerSpec: simcloud.LoadBalancerSpec{
			HealthCheckPort: int32(hcPort),
			Backends:        []simcloud.Backend{{Node: "n2", Address: n2}, {Node: "n3", Address: n3}}}},
		// A backend that is not one of the sim cloud's machines (the
		// local node) is not reached through the sim cloud's network.
		{Name: "foreign", VIP: "198.18.128.3", LoadBalancerSpec: simcloud.LoadBalancerSpec{
			Backends: []simcloud.Backend{{Node: "n1", Address: n1}, {Node: "n3", Address: n3}}}},
		{Name: "outside-pool", VIP: "198.18.0.7", LoadBalancerSpec: simcloud.LoadBalancerSpec{
			Backends: []simcloud.Backend{{Node: "n2", Address: n2}}}},
	}
	programmed := map[netip.Addr][]string{}
	r := &router{
		client: client,
		nodes: []node{
			{Name: "n1", IP: n1, Platform: PlatformLocal},
			{Name: "n2", IP: n2, Platform: PlatformSim},
			{Name: "n3", IP: n3, Platform: PlatformSim},
		},
		simLBs:      func() []simcloud.LoadBalancer { return lbs },
		healthzPort: healthz,
		probe:       &http.Client{},
		setRoute: func(_ context.Context, vip netip.Addr, hops []string) error {
			if hops == nil {
				delete(programmed, vip)
			} else {
				programmed[vip] = hops
			}
			return nil
		},
		routes: map[netip.Addr][]string{},
	}
	ctx := context.Background()
	r.sync(ctx)
	want := map[netip.Addr][]string{
		netip.MustParseAddr("198.18.100.1"): {n1}, // local: the local node only
		netip.MustParseAddr("198.18.128.1"): {n2}, // sim: its backend
		netip.MustParseAddr("198.18.128.2"): {n3}, // sim, Local: the backend with an endpoint
		netip.MustParseAddr("198.18.128.3"): {n3}, // sim: its backends among the sim machines
	}
	if len(programmed) != len(want) {
		t.Errorf("programmed %v, want %v", programmed, want)
	}
	for vip, hops := range want {
		if !slices.Equal(programmed[vip], hops) {
			t.Errorf("VIP %s: programmed %v, want %v", vip, programmed[vip], hops)
		}
	}

	// The sim load balancer gone: its VIP's route goes.
	lbs = lbs[1:]
	r.sync(ctx)
	if hops, ok := programmed[netip.MustParseAddr("198.18.128.1")]; ok {
		t.Errorf("a deleted sim load balancer's VIP is still routed to %v", hops)
	}
}

// A node that passed its health check stays a next hop until failThreshold
// checks in a row fail (one slow answer must not move the VIP's flows), and
// a node that never passed is not a next hop.
func TestRouterFailThreshold(t *testing.T) {
	n1, n2 := "127.0.0.1", "127.0.0.2"
	var status1 atomic.Int32
	status1.Store(http.StatusOK)
	ln, err := net.Listen("tcp", net.JoinHostPort(n1, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status1.Load())) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	healthz := ln.Addr().(*net.TCPAddr).Port
	serveHealth(t, n2, healthz, http.StatusServiceUnavailable)

	vip := netip.MustParseAddr("198.18.100.1")
	client := fake.NewClientset(lbService("cluster", corev1.ServiceExternalTrafficPolicyCluster, 0, vip.String()))
	var log strings.Builder
	r := &router{
		client:      client,
		nodes:       []node{{Name: "n1", IP: n1, Platform: PlatformLocal}, {Name: "n2", IP: n2, Platform: PlatformLocal}},
		healthzPort: healthz,
		probe:       &http.Client{},
		setRoute:    func(context.Context, netip.Addr, []string) error { return nil },
		routes:      map[netip.Addr][]string{},
		log:         &log,
	}
	ctx := context.Background()
	r.sync(ctx)
	if got := r.routes[vip]; !slices.Equal(got, []string{n1}) {
		t.Fatalf("routed to %v, want [%s] (n2 never passed)", got, n1)
	}
	status1.Store(http.StatusServiceUnavailable)
	for i := 1; i < failThreshold; i++ {
		r.sync(ctx)
		if got := r.routes[vip]; !slices.Equal(got, []string{n1}) {
			t.Fatalf("after %d failed checks routed to %v, want [%s] still", i, got, n1)
		}
	}
	r.sync(ctx)
	if got := r.routes[vip]; len(got) != 0 {
		t.Fatalf("after %d failed checks in a row still routed to %v", failThreshold, got)
	}
	// Back: one pass restores it; the count starts again.
	status1.Store(http.StatusOK)
	r.sync(ctx)
	status1.Store(http.StatusServiceUnavailable)
	r.sync(ctx)
	if got := r.routes[vip]; !slices.Equal(got, []string{n1}) {
		t.Fatalf("one failure after a pass routed to %v, want [%s]", got, n1)
	}
	for _, want := range []string{"failed (1 in a row of 3)", "next hops [] -> [" + n1 + "]", "next hops [" + n1 + "] -> []"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("router log lacks %q:\n%s", want, log.String())
		}
	}
}
