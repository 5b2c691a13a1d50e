package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
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
		// Outrigger's local provider binds VIPs from the pool: the
		// namespace answers on all of it, as Linux does on 127/8.
		{"route", "add", "local", VIPPool, "dev", "lo"},
	} {
		if err := h(args...); err != nil {
			return err
		}
	}
	if err := run(ctx, "ip", "netns", "exec", harnessNS, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
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
		if err := run(ctx, "ip", "netns", "exec", n.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			return err
		}
	}
	return nil
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
// loopback, reachable from the namespaces at BridgeIP:APIServerPort: a TCP
// forwarder listening inside the harness namespace. TLS passes through; the
// kubeconfigs of the nodes name the server "localhost" as its certificate
// does.
func (c *Cluster) startForwarder(context.Context) error {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return err
	}
	target := u.Host
	ln, err := listenInNetns("/var/run/netns/"+harnessNS, "tcp", fmt.Sprintf("%s:%d", BridgeIP, APIServerPort))
	if err != nil {
		return err
	}
	c.fwd = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go splice(conn, target)
		}
	}()
	return nil
}

func splice(in net.Conn, target string) {
	defer in.Close()
	out, err := net.Dial("tcp", target)
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
