package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// fakeNode is a machine on a loopback address: TCP and UDP servers on its
// node ports that answer with its name, and a kube-proxy healthz whose
// answer the test controls.
type fakeNode struct {
	name    string
	ip      string
	healthy atomic.Bool
}

func startNode(t *testing.T, name, ip string, healthPort int, nodePorts ...int) *fakeNode {
	t.Helper()
	n := &fakeNode{name: name, ip: ip}
	n.healthy.Store(true)
	hl, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(healthPort)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})}
	go func() { _ = srv.Serve(hl) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, p := range nodePorts {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					line, _ := bufio.NewReader(c).ReadString('\n')
					fmt.Fprintf(c, "%s %s", name, line)
				}()
			}
		}()
		pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				k, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo([]byte(name+" "+string(buf[:k])), from)
			}
		}()
	}
	return n
}

func (n *fakeNode) node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}}},
	}
}

func newProvider(t *testing.T, config string) *balancers {
	t.Helper()
	p, err := New(strings.NewReader(config))
	if err != nil {
		t.Fatal(err)
	}
	lbs := p.(*Provider).lbs
	t.Cleanup(lbs.closeAll)
	return lbs
}

func service(uid string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "svc-" + uid, UID: types.UID(uid)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports},
	}
}

func tcpPort(port, nodePort int) corev1.ServicePort {
	return corev1.ServicePort{Name: fmt.Sprintf("tcp-%d", port), Protocol: corev1.ProtocolTCP, Port: int32(port), NodePort: int32(nodePort)}
}

// ask sends one line over TCP from the local address from ("" for any) and
// returns the answer, or an error when the connection is refused or closed
// without one.
func ask(vip string, port int, from string) (string, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", net.JoinHostPort(vip, strconv.Itoa(port)))
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintln(c, "hello"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", io.EOF
	}
	return strings.TrimSpace(string(b)), nil
}

func nodeOf(answer string) string { return strings.Fields(answer)[0] }

func TestTrafficFailoverAndLivePorts(t *testing.T) {
	health, np1, np2 := freeport.Get(t), freeport.Get(t), freeport.Get(t)
	a := startNode(t, "node-a", "127.0.0.11", health, np1, np2)
	b := startNode(t, "node-b", "127.0.0.12", health, np1, np2)
	lbs := newProvider(t, fmt.Sprintf("pool: 127.0.101.0/24\nhealthCheck: {kubeProxyPort: %d, interval: 100ms, timeout: 500ms}\n", health))
	ctx := context.Background()
	svc := service("traffic", tcpPort(8080, np1))
	st, err := lbs.EnsureLoadBalancer(ctx, "c", svc, []*corev1.Node{a.node(), b.node()})
	if err != nil {
		t.Fatal(err)
	}
	vip := st.Ingress[0].IP
	if !netip.MustParsePrefix("127.0.101.0/24").Contains(netip.MustParseAddr(vip)) || *st.Ingress[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Fatalf("ingress %+v: want a VIP from the pool", st.Ingress)
	}

	seen := map[string]int{}
	for range 10 {
		got, err := ask(vip, 8080, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(got, "hello") {
			t.Fatalf("answer %q did not carry the request", got)
		}
		seen[nodeOf(got)]++
	}
	if seen["node-a"] == 0 || seen["node-b"] == 0 {
		t.Fatalf("traffic not spread over both nodes: %v", seen)
	}

	// node-a fails its health check: only node-b gets traffic.
	a.healthy.Store(false)
	poll.Until(t, 10*time.Second, "node-a out of rotation", func() bool {
		for range 6 {
			if got, err := ask(vip, 8080, ""); err != nil || nodeOf(got) != "node-b" {
				return false
			}
		}
		return true
	})
	a.healthy.Store(true)
	poll.Until(t, 10*time.Second, "node-a back in rotation", func() bool {
		for range 6 {
			if got, err := ask(vip, 8080, ""); err == nil && nodeOf(got) == "node-a" {
				return true
			}
		}
		return false
	})

	// A port added live answers on the same VIP; removing the first closes it.
	svc.Spec.Ports = append(svc.Spec.Ports, tcpPort(9090, np2))
	if st, err = lbs.EnsureLoadBalancer(ctx, "c", svc, []*corev1.Node{a.node(), b.node()}); err != nil || st.Ingress[0].IP != vip {
		t.Fatalf("adding a port: %v, ingress %v (want VIP %s kept)", err, st, vip)
	}
	if _, err := ask(vip, 9090, ""); err != nil {
		t.Fatalf("added port: %v", err)
	}
	svc.Spec.Ports = svc.Spec.Ports[1:]
	if _, err := lbs.EnsureLoadBalancer(ctx, "c", svc, []*corev1.Node{a.node(), b.node()}); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(vip, 8080, ""); err == nil {
		t.Fatal("removed port still answers")
	}
	if _, err := ask(vip, 9090, ""); err != nil {
		t.Fatalf("remaining port: %v", err)
	}

	// Backends updated: only node-b.
	if err := lbs.UpdateLoadBalancer(ctx, "c", svc, []*corev1.Node{b.node()}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if got, err := ask(vip, 9090, ""); err != nil || nodeOf(got) != "node-b" {
			t.Fatalf("after update: %q %v, want node-b only", got, err)
		}
	}

	if err := lbs.EnsureLoadBalancerDeleted(ctx, "c", svc); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(vip, 9090, ""); err == nil {
		t.Fatal("deleted load balancer still answers")
	}
	if _, exists, _ := lbs.GetLoadBalancer(ctx, "c", svc); exists {
		t.Fatal("deleted load balancer still exists")
	}
}

func TestUDP(t *testing.T) {
	health, np := freeport.Get(t), freeport.Get(t)
	a := startNode(t, "node-a", "127.0.0.21", health, np)
	lbs := newProvider(t, fmt.Sprintf("pool: 127.0.102.0/24\nhealthCheck: {kubeProxyPort: %d}\n", health))
	svc := service("udp", corev1.ServicePort{Protocol: corev1.ProtocolUDP, Port: 5353, NodePort: int32(np)})
	st, err := lbs.EnsureLoadBalancer(context.Background(), "c", svc, []*corev1.Node{a.node()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", st.Ingress[0].IP+":5353")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		msg := fmt.Sprintf("ping-%d", i)
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err != nil || string(buf[:n]) != "node-a "+msg {
			t.Fatalf("UDP answer %q, %v", buf[:n], err)
		}
	}
}

func TestSourceRangesAndAffinity(t *testing.T) {
	health, np := freeport.Get(t), freeport.Get(t)
	a := startNode(t, "node-a", "127.0.0.31", health, np)
	b := startNode(t, "node-b", "127.0.0.32", health, np)
	lbs := newProvider(t, fmt.Sprintf("pool: 127.0.103.0/24\nhealthCheck: {kubeProxyPort: %d}\n", health))
	svc := service("ranges", tcpPort(80, np))
	svc.Spec.LoadBalancerSourceRanges = []string{"127.0.0.5/32"}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	st, err := lbs.EnsureLoadBalancer(context.Background(), "c", svc, []*corev1.Node{a.node(), b.node()})
	if err != nil {
		t.Fatal(err)
	}
	vip := st.Ingress[0].IP
	if _, err := ask(vip, 80, "127.0.0.6"); err == nil {
		t.Fatal("a client outside loadBalancerSourceRanges got an answer")
	}
	first, err := ask(vip, 80, "127.0.0.5")
	if err != nil {
		t.Fatalf("a client inside loadBalancerSourceRanges: %v", err)
	}
	for range 8 {
		got, err := ask(vip, 80, "127.0.0.5")
		if err != nil || nodeOf(got) != nodeOf(first) {
			t.Fatalf("ClientIP affinity broken: %q then %q (%v)", first, got, err)
		}
	}
}

func TestVIPChoice(t *testing.T) {
	lbs := newProvider(t, "pool: 127.0.104.0/24\nhealthCheck: {disabled: true}\n")
	ctx := context.Background()
	np := freeport.Get(t)

	wanted := service("wanted", tcpPort(freeport.Get(t), np))
	wanted.Spec.LoadBalancerIP = "127.0.104.77"
	st, err := lbs.EnsureLoadBalancer(ctx, "c", wanted, nil)
	if err != nil || st.Ingress[0].IP != "127.0.104.77" {
		t.Fatalf("spec.loadBalancerIP: %v %v", st, err)
	}
	clash := service("clash", tcpPort(freeport.Get(t), np))
	clash.Spec.LoadBalancerIP = "127.0.104.77"
	if _, err := lbs.EnsureLoadBalancer(ctx, "c", clash, nil); err == nil || provider.Reason(err) != "LoadBalancerIPNotAvailable" {
		t.Fatalf("taken loadBalancerIP: err %v (reason %s)", err, provider.Reason(err))
	}
	outside := service("outside", tcpPort(freeport.Get(t), np))
	outside.Spec.LoadBalancerIP = "198.18.9.9"
	if _, err := lbs.EnsureLoadBalancer(ctx, "c", outside, nil); err == nil || !strings.Contains(err.Error(), "not in the pool") {
		t.Fatalf("loadBalancerIP outside the pool: %v", err)
	}

	// A restarted Outrigger (a new provider) keeps the VIP in the status.
	restarted := service("restarted", tcpPort(freeport.Get(t), np))
	restarted.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.104.200", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	fresh := newProvider(t, "pool: 127.0.104.0/24\nhealthCheck: {disabled: true}\n")
	if st, err := fresh.EnsureLoadBalancer(ctx, "c", restarted, nil); err != nil || st.Ingress[0].IP != "127.0.104.200" {
		t.Fatalf("VIP from status after restart: %v %v", st, err)
	}
	if name := fresh.GetLoadBalancerName(ctx, "c", restarted); name != cloudprovider.DefaultLoadBalancerName(restarted) {
		t.Errorf("name %s is not upstream's default", name)
	}
}

// With dataPlane: nodes the provider allocates VIPs and serves nothing: the
// nodes do (package announce), so no port may be bound here, and a Service
// needs no node ports (allocateLoadBalancerNodePorts: false).
func TestNodesDataPlaneServesNothing(t *testing.T) {
	lbs := newProvider(t, "pool: 127.0.106.0/24\ndataPlane: nodes\n")
	ctx := context.Background()
	port := freeport.Get(t)
	svc := service("announced", tcpPort(port, 0))
	st, err := lbs.EnsureLoadBalancer(ctx, "c", svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	vip := st.Ingress[0].IP
	if !netip.MustParsePrefix("127.0.106.0/24").Contains(netip.MustParseAddr(vip)) || *st.Ingress[0].IPMode != corev1.LoadBalancerIPModeVIP {
		t.Fatalf("status %+v: want a VIP from the pool with ipMode VIP", st.Ingress[0])
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(vip, fmt.Sprint(port)), time.Second); err == nil {
		c.Close()
		t.Fatalf("%s:%d accepted a connection: the nodes data plane must not proxy", vip, port)
	}
	if err := lbs.UpdateLoadBalancer(ctx, "c", svc, nil); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := lbs.GetLoadBalancer(ctx, "c", svc); !exists {
		t.Fatal("GetLoadBalancer: not found after EnsureLoadBalancer")
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "c", svc); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := lbs.GetLoadBalancer(ctx, "c", svc); exists {
		t.Fatal("GetLoadBalancer: found after EnsureLoadBalancerDeleted")
	}
}

// The proxy data plane forwards to node ports: a Service without them is
// refused with a reason the service controller puts in its Event.
func TestProxyDataPlaneNeedsNodePorts(t *testing.T) {
	lbs := newProvider(t, "pool: 127.0.107.0/24\n")
	_, err := lbs.EnsureLoadBalancer(context.Background(), "c", service("no-node-ports", tcpPort(freeport.Get(t), 0)), nil)
	if err == nil || provider.Reason(err) != provider.ReasonInvalidSpec || !strings.Contains(err.Error(), "dataPlane: nodes") {
		t.Fatalf("err = %v, want InvalidSpec naming dataPlane: nodes", err)
	}
}

func TestPoolExhausted(t *testing.T) {
	lbs := newProvider(t, "pool: 127.0.105.0/30\nhealthCheck: {disabled: true}\n")
	ctx := context.Background()
	var err error
	for i := range 4 {
		_, err = lbs.EnsureLoadBalancer(ctx, "c", service(fmt.Sprint("x", i), tcpPort(freeport.Get(t), 30000)), nil)
		if err != nil {
			break
		}
	}
	if err == nil || provider.Reason(err) != provider.ReasonQuotaExceeded {
		t.Fatalf("err = %v, want the pool exhausted (QuotaExceeded)", err)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct{ config, want string }{
		{"pool: 198.18.0.0/33\n", "pool"},
		{"pool: 127.0.0.1/32\n", "holds no usable address"},
		{"healthCheck: {interval: soon}\n", "healthCheck.interval"},
		{"healthCheck: {kubeProxyPort: 70000}\n", "not a port"},
		{"poool: 127.0.0.0/24\n", "unknown field"},
		{"dataPlane: kernel\n", "dataPlane"},
		{"instances: {url: \"ftp://x\"}\n", "instances.url"},
		{"instances: {timeout: never}\n", "instances.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if _, err := New(strings.NewReader(tt.config)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := New(nil); err != nil {
		t.Fatalf("no cloud-config: %v", err)
	}
}

// With externalTrafficPolicy: Local the Service's healthCheckNodePort, not
// kube-proxy's port, decides which nodes get traffic.
func TestHealthCheckNodePortForLocalTraffic(t *testing.T) {
	kubeProxy, hcPort, np := freeport.Get(t), freeport.Get(t), freeport.Get(t)
	a := startNode(t, "node-a", "127.0.0.41", kubeProxy, np)
	b := startNode(t, "node-b", "127.0.0.42", kubeProxy, np)
	// The per-Service health port: only node-b has local endpoints.
	for _, n := range []struct {
		ip string
		ok bool
	}{{"127.0.0.41", false}, {"127.0.0.42", true}} {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.ip, strconv.Itoa(hcPort)))
		if err != nil {
			t.Fatal(err)
		}
		ok := n.ok
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	lbs := newProvider(t, fmt.Sprintf("pool: 127.0.106.0/24\nhealthCheck: {kubeProxyPort: %d, interval: 100ms}\n", kubeProxy))
	svc := service("local-traffic", tcpPort(80, np))
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Spec.HealthCheckNodePort = int32(hcPort)
	st, err := lbs.EnsureLoadBalancer(context.Background(), "c", svc, []*corev1.Node{a.node(), b.node()})
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "only node-b, the node with local endpoints, serving", func() bool {
		for range 6 {
			if got, err := ask(st.Ingress[0].IP, 80, ""); err != nil || nodeOf(got) != "node-b" {
				return false
			}
		}
		return true
	})
	// kube-proxy's own health (all healthy) was not what decided.
	if !a.healthy.Load() {
		t.Fatal("test setup: node-a's kube-proxy should be healthy")
	}
}

// The lifecycle answers come from the instance API when one is configured;
// an API that fails is an error (the lifecycle controller then does
// nothing), never "gone".
func TestInstanceAPI(t *testing.T) {
	states := map[string]string{"up": `{"state":"running"}`, "off": `{"state":"stopped"}`, "garbled": `{"state":`, "ended": `{"state":"terminated"}`}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/instances/")
		if name == "broken" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		if name == "gone" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":"InstanceNotFound"}`)
			return
		}
		body, ok := states[name]
		if !ok {
			http.NotFound(w, r) // a bare 404: a wrong path, a proxy's page
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	cp, err := New(strings.NewReader("instances: {url: " + srv.URL + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cp.(*Provider)
	tests := []struct {
		node             string
		exists, shutdown bool
		wantErr          bool
	}{
		{node: "up", exists: true},
		{node: "off", exists: true, shutdown: true},
		{node: "gone"},
		{node: "ended"},
		{node: "unknown-path", wantErr: true},
		{node: "broken", wantErr: true},
		{node: "garbled", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tt.node}}
			exists, err := p.InstanceExists(context.Background(), n)
			if (err != nil) != tt.wantErr || (err == nil && exists != tt.exists) {
				t.Errorf("InstanceExists = %v, %v; want %v (error: %v)", exists, err, tt.exists, tt.wantErr)
			}
			shutdown, err := p.InstanceShutdown(context.Background(), n)
			if (err != nil) != tt.wantErr || (err == nil && shutdown != tt.shutdown) {
				t.Errorf("InstanceShutdown = %v, %v; want %v (error: %v)", shutdown, err, tt.shutdown, tt.wantErr)
			}
			_, err = p.InstanceMetadata(context.Background(), n)
			if (err != nil) != (tt.wantErr || !tt.exists) || (!tt.wantErr && !tt.exists && !errors.Is(err, cloudprovider.InstanceNotFound)) {
				t.Errorf("InstanceMetadata error = %v; want InstanceNotFound for a machine that is gone, an error for a bad answer", err)
			}
		})
	}
}

// A connection that arrives before any backend accepts (a Service just
// provisioned: its address is published a moment before its nodes' ports
// open) is held and retried, not reset.
func TestFirstConnectionWaitsForABackend(t *testing.T) {
	health, np := freeport.Get(t), freeport.Get(t)
	a := startNode(t, "node-a", "127.0.0.13", health)
	lbs := newProvider(t, fmt.Sprintf("pool: 127.0.102.0/24\nhealthCheck: {kubeProxyPort: %d, interval: 100ms, timeout: 500ms}\n", health))
	st, err := lbs.EnsureLoadBalancer(context.Background(), "c", service("early", tcpPort(8080, np)), []*corev1.Node{a.node()})
	if err != nil {
		t.Fatal(err)
	}
	b := lbs.byName[lbs.GetLoadBalancerName(context.Background(), "c", service("early"))]
	answer := make(chan error, 1)
	go func() {
		got, err := ask(st.Ingress[0].IP, 8080, "")
		if err == nil && got != "node-a hello" {
			err = fmt.Errorf("answer %q", got)
		}
		answer <- err
	}()
	// Only once the proxy has found the node's port closed does it open.
	poll.Until(t, 10*time.Second, "a refused connection to the backend", func() bool { return b.dialFailures.Load() > 0 })
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.13", strconv.Itoa(np)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, "node-a %s", line)
	}()
	if err := <-answer; err != nil {
		t.Fatalf("the early connection: %v", err)
	}
}
