package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// setupNetwork makes the harness namespace with the bridge, and a namespace
// per node joined to the bridge by a veth pair. Nothing is configured in
// the host's namespace.
func (c *Cluster) setupNetwork(ctx context.Context) error {
	h := func(args ...string) error { return run(ctx, "ip", append([]string{"-n", harnessNS}, args...)...) }
	if _, err := os.Stat(netnsDir); os.IsNotExist(err) {
		c.state.NetnsDirCreated = true
	}
	if err := c.state.addNetns(harnessNS); err != nil {
		return err
	}
	if err := run(ctx, "ip", "netns", "add", harnessNS); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", BridgeIP + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
		// Traffic to a VIP comes from ExternalClientIP, a client
		// outside the cluster's networks; the router (router.go) routes
		// each VIP to its healthy nodes with that source.
		{"addr", "add", ExternalClientIP + "/32", "dev", "lo"},
	} {
		if err := h(args...); err != nil {
			return err
		}
	}
	// Every VIP goes to the router namespace, which forwards it to its
	// healthy nodes (router.go).
	for _, pool := range c.vipPools() {
		if err := h("route", "add", pool, "via", routerIP, "dev", bridgeName, "onlink", "src", ExternalClientIP); err != nil {
			return err
		}
	}
	if err := c.setupRouterNetns(ctx); err != nil {
		return err
	}
	// ARP asks from the bridge's own address (arp_announce 2), not from
	// ExternalClientIP, which is not on the node network. A redirect
	// would send a VIP's packets past the router (it sends none).
	if err := run(ctx, "ip", "netns", "exec", harnessNS, "sysctl", "-qw", "net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf."+bridgeName+".arp_announce=2",
		"net.ipv4.conf.all.accept_redirects=0", "net.ipv4.conf."+bridgeName+".accept_redirects=0"); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if err := c.state.addNetns(n.Name); err != nil {
			return err
		}
		if err := run(ctx, "ip", "netns", "add", n.Name); err != nil {
			return err
		}
		nn := func(args ...string) error { return run(ctx, "ip", append([]string{"-n", n.Name}, args...)...) }
		if err := h("link", "add", n.Veth, "type", "veth", "peer", "name", "eth0", "netns", n.Name); err != nil {
			return err
		}
		if err := h("link", "set", n.Veth, "master", bridgeName, "up"); err != nil {
			return err
		}
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"addr", "add", n.IP + "/24", "dev", "eth0"},
			{"link", "set", "eth0", "up"},
			{"route", "add", "default", "via", BridgeIP},
		} {
			if err := nn(args...); err != nil {
				return err
			}
		}
		// A packet for a VIP that kube-proxy did not take (a port the
		// Service does not have) is dropped here, not sent back to the
		// router, which would send it here again until its TTL ran out.
		for _, pool := range c.vipPools() {
			if err := nn("route", "add", "blackhole", pool); err != nil {
				return err
			}
		}
		if err := run(ctx, "ip", "netns", "exec", n.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return err
		}
	}
	return nil
}

// setupRouterNetns makes the router namespace: one leg on the bridge
// (routerIP), the VIP routes the router programs (router.go), and a sink
// for the rest of each pool. A VIP's ECMP choice is made here, for packets
// it forwards, and not in the harness, which sends them: the harness's own
// kernel, choosing a next hop for the packets it sends itself, sent some
// packets of one connection to another node once a route changed (a
// connection's last ACK, sent from TIME_WAIT, and the RSTs after it), so the
// node that served the connection kept it in LAST_ACK, and a later
// connection from the same port met that state and hung. Forwarded, every
// packet is hashed from its own headers: addresses, protocol and ports
// (fib_multipath_hash_policy 3 with those fields), as a cloud's network
// hashes a flow.
func (c *Cluster) setupRouterNetns(ctx context.Context) error {
	if err := c.state.addNetns(routerNS); err != nil {
		return err
	}
	if err := run(ctx, "ip", "netns", "add", routerNS); err != nil {
		return err
	}
	h := func(args ...string) error { return run(ctx, "ip", append([]string{"-n", harnessNS}, args...)...) }
	if err := h("link", "add", routerVeth, "type", "veth", "peer", "name", "eth0", "netns", routerNS); err != nil {
		return err
	}
	if err := h("link", "set", routerVeth, "master", bridgeName, "up"); err != nil {
		return err
	}
	r := func(args ...string) error { return run(ctx, "ip", append([]string{"-n", routerNS}, args...)...) }
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", routerIP + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", ExternalClientIP + "/32", "via", BridgeIP},
		// A VIP the router has no healthy node for (or that no Service
		// holds) swallows packets, as a cloud's network does: the
		// sender times out rather than getting an error. Upstream's e2e
		// tests take only a timeout as "not reachable".
		// (The sink is a veth pair with no one behind it, reached through
		// a permanent neighbour entry: no ARP, no error; a dummy
		// interface would do, where the kernel has the module.)
		{"link", "add", sinkName, "type", "veth", "peer", "name", sinkName + "p"},
		{"link", "set", sinkName, "up"},
		{"link", "set", sinkName + "p", "up"},
		{"neigh", "add", sinkGateway, "lladdr", "02:00:00:00:00:01", "dev", sinkName, "nud", "permanent"},
	} {
		if err := r(args...); err != nil {
			return err
		}
	}
	for _, pool := range c.vipPools() {
		if err := r("route", "add", pool, "via", sinkGateway, "dev", sinkName, "onlink"); err != nil {
			return err
		}
	}
	// It forwards out of the interface packets came in by: no ICMP
	// redirects, which would send the harness straight to one node.
	return run(ctx, "ip", "netns", "exec", routerNS, "sysctl", "-qw", "net.ipv4.ip_forward=1",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0",
		"net.ipv4.fib_multipath_hash_policy=3", "net.ipv4.fib_multipath_hash_fields=0x0037")
}

// listenInNetns listens on addr inside the network namespace at nsPath; the
// socket stays in that namespace whatever thread serves it.
func listenInNetns(nsPath, network, addr string) (net.Listener, error) {
	return inNetns(nsPath, func() (net.Listener, error) { return net.Listen(network, addr) })
}

// inNetns runs create on an OS thread moved into the network namespace at
// nsPath: sockets it creates belong to that namespace for good. The thread
// is given back only once it is back in this process's namespace; if it
// cannot return, it ends with its goroutine instead of running others in
// the wrong namespace, and what create made is closed.
func inNetns[T io.Closer](nsPath string, create func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, fmt.Errorf("entering %s: %w", nsPath, err)}
			return
		}
		v, merr := create()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if merr == nil {
				v.Close()
			}
			ch <- result{zero, fmt.Errorf("leaving %s: %w", nsPath, err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{v, merr}
	}()
	r := <-ch
	return r.v, r.err
}

// startForwarder makes the API server, which listens on the host's
// loopback, reachable from the namespaces at BridgeIP on the same port: a
// TCP forwarder listening inside the harness namespace. TLS passes through;
// the serving certificate names BridgeIP and the kubernetes Service's
// ClusterIP, which is where the API server advertises itself, so pods using
// their in-cluster configuration reach it too (kube-proxy sends the
// ClusterIP to BridgeIP). It also starts the egress proxy.
func (c *Cluster) startForwarder(ctx context.Context) error {
	ln, err := listenInNetns("/var/run/netns/"+harnessNS, "tcp", net.JoinHostPort(BridgeIP, c.apiPort))
	if err != nil {
		return err
	}
	c.fwd = append(c.fwd, ln)
	target := net.JoinHostPort("127.0.0.1", c.apiPort)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go splice(conn, func() (net.Conn, error) { return net.Dial("tcp", target) })
		}
	}()
	return c.startEgressProxy(ctx)
}

// egressConfig is the API server's EgressSelectorConfiguration: its
// connections to the cluster (kubelets for logs, exec and port-forward;
// the nodes, pods and services proxies) go through an HTTP CONNECT proxy on
// a unix socket, which the harness serves by dialing from the harness
// namespace. So the API server stays on the host's loopback and still
// reaches node IPs that exist only inside the namespaces.
func egressConfig(socket string) string {
	return fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, socket)
}

func (c *Cluster) egressSocket() string { return filepath.Join(c.opts.WorkDir, "egress.sock") }

func (c *Cluster) startEgressProxy(context.Context) error {
	_ = os.Remove(c.egressSocket())
	ln, err := net.Listen("unix", c.egressSocket())
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	c.fwd = append(c.fwd, ln)
	srv := &http.Server{Handler: http.HandlerFunc(connectHandler), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// connectHandler serves HTTP CONNECT by dialing the target from the harness
// namespace.
func connectHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "only CONNECT is served", http.StatusMethodNotAllowed)
		return
	}
	out, err := dialInNetns(r.Context(), "/var/run/netns/"+harnessNS, "tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = out.Close()
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	in, buf, err := hj.Hijack()
	if err != nil {
		_ = out.Close()
		return
	}
	if _, err := in.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = in.Close()
		_ = out.Close()
		return
	}
	// Bytes the client sent after its request headers are already
	// buffered.
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ := buf.Reader.Peek(n)
		if _, err := out.Write(pending); err != nil {
			_ = in.Close()
			_ = out.Close()
			return
		}
	}
	go splice(in, func() (net.Conn, error) { return out, nil })
}

func splice(in net.Conn, dial func() (net.Conn, error)) {
	defer in.Close()
	out, err := dial()
	if err != nil {
		return
	}
	defer out.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			_ = err
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go cp(out, in)
	go cp(in, out)
	wg.Wait()
}

// dialInNetns dials addr from inside the network namespace at nsPath. The
// socket is made in the namespace; connecting may go on after the thread is
// back.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	return inNetns(nsPath, func() (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
}

// HarnessHTTPClient is an HTTP client whose connections start in the
// harness namespace, where node IPs and load balancer VIPs are reachable.
func HarnessHTTPClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, addr)
			},
		},
	}
}
