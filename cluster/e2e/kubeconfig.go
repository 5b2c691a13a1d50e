package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// APIServerLoopback is where, inside the harness namespace, the runner
// forwards to the cluster's API server forwarder (cluster.BridgeIP). The
// suite needs a server address its certificate holds: the certificate
// names 127.0.0.1 and localhost, and the e2e framework re-applies the
// kubeconfig's server as an override, which drops tls-server-name
// (client-go clears it when the server is overridden), so connecting to
// the bridge address with tls-server-name: localhost fails verification.
const APIServerLoopback = "127.0.0.1:6443"

// RewriteKubeconfig writes to dst the kubeconfig at src (the cluster's
// admin one, for the host's loopback) with every cluster's server set to
// https://addr and no tls-server-name.
func RewriteKubeconfig(src, dst, addr string) error {
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", src, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
		c.TLSServerName = ""
	}
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", dst, err)
	}
	return nil
}

// Forward accepts connections on ln and splices each to target, until ctx
// ends; then it closes ln and every connection, and returns once they are
// done. TLS passes through.
func Forward(ctx context.Context, ln net.Listener, target string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = true
		} else {
			delete(conns, c)
		}
	}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for c := range conns {
			c.Close()
		}
	})
	defer stop()
	for {
		in, err := ln.Accept()
		if err != nil {
			break
		}
		track(in, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer track(in, false)
			defer in.Close()
			var d net.Dialer
			out, err := d.DialContext(ctx, "tcp", target)
			if err != nil {
				return
			}
			track(out, true)
			defer track(out, false)
			defer out.Close()
			if ctx.Err() != nil {
				return // stopped while dialing: out missed the sweep
			}
			splice(in, out)
		}()
	}
	wg.Wait()
}

// splice copies both ways until both directions end, passing each EOF on
// as a half close.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil && !errors.Is(err, net.ErrClosed) {
			// The peer reset: end the other direction too.
			dst.Close()
			src.Close()
			return
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}
