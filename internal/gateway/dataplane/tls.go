package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// A TLS port serves TLSRoutes: it reads the client's ClientHello without
// answering it, picks the route by the server name (SNI) it carries, and
// then either replays the bytes read to a backend and splices the rest
// (Passthrough: the backend terminates TLS), or terminates TLS itself with
// the port's certificate and splices the decrypted stream (Terminate).
// Everything read before a backend is chosen comes from anyone on the
// internet, so it is bounded in bytes (maxHelloBytes) and in time
// (Limits.RequestHeaderTimeout).

// maxHelloBytes bounds what is read of a connection before its route is
// known. A ClientHello is a few hundred bytes, about 1.8 KiB with a
// post-quantum key share; 64 KiB leaves room for large session tickets
// and many extensions, not for a client to make the proxy buffer at will.
const maxHelloBytes = 64 << 10

// errHelloRead ends the handshake used only to read a ClientHello.
var errHelloRead = errors.New("client hello read")

// errHelloTooLarge: the client sent more than maxHelloBytes without
// completing its ClientHello.
var errHelloTooLarge = errors.New("client hello larger than allowed")

// recordingConn is a connection as crypto/tls reads a ClientHello from it:
// reads are kept (to be replayed) up to a bound, writes (the alert that
// ends the aborted handshake) are dropped, for the client must not see
// them.
type recordingConn struct {
	net.Conn
	read  []byte
	limit int
}

func (c *recordingConn) Read(p []byte) (int, error) {
	room := c.limit - len(c.read)
	if room <= 0 {
		return 0, errHelloTooLarge
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := c.Conn.Read(p)
	c.read = append(c.read, p[:n]...)
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// readServerName reads c's ClientHello and returns the server name it
// asks for ("" none) with every byte read, which the backend (or the
// terminating handshake) must be given first. crypto/tls parses the
// ClientHello, as it does for every TLS server of the data plane: a
// handshake is started and stopped as soon as the hello is parsed. ctx
// bounds the time the client has to send it.
func readServerName(ctx context.Context, c net.Conn) (string, []byte, error) {
	rec := &recordingConn{Conn: c, limit: maxHelloBytes}
	var name string
	var got bool
	srv := tls.Server(rec, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = hello.ServerName, true
			return nil, errHelloRead
		},
	})
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(deadline)
		defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	}
	err := srv.HandshakeContext(ctx)
	if !got {
		if err == nil {
			err = errors.New("handshake ended without a ClientHello")
		}
		return "", nil, fmt.Errorf("reading the ClientHello: %w", err)
	}
	return strings.ToLower(name), rec.read, nil
}

// replayConn is a client connection whose first bytes, already read, are
// read again before the rest.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the client's side, when the connection below
// can: splice ends each direction as the other side ended it.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the connection below, for the connection table (limits.go).
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// sniRouter is a TLS port's hosts, by server name.
type sniRouter struct {
	exact map[string]*TLSHost
	// wildcards, the longest first.
	wildcards []*TLSHost
	any       *TLSHost
}

func compileSNI(hosts []TLSHost) (*sniRouter, error) {
	r := &sniRouter{exact: map[string]*TLSHost{}}
	for i := range hosts {
		h := &hosts[i]
		name := strings.ToLower(h.Hostname)
		switch {
		case name == "":
			if r.any != nil {
				return nil, errors.New(`TLS host "" listed twice`)
			}
			r.any = h
		case strings.HasPrefix(name, "*."):
			r.wildcards = append(r.wildcards, h)
		default:
			if _, dup := r.exact[name]; dup {
				return nil, fmt.Errorf("TLS host %q listed twice", name)
			}
			r.exact[name] = h
		}
	}
	slices.SortStableFunc(r.wildcards, func(a, b *TLSHost) int { return len(b.Hostname) - len(a.Hostname) })
	return r, nil
}

// host is the host serving server name: exact, then the longest wildcard
// (which stands for one label or more), then the one for any name.
func (r *sniRouter) host(name string) *TLSHost {
	if r == nil {
		return nil
	}
	if h, ok := r.exact[name]; ok && name != "" {
		return h
	}
	for _, h := range r.wildcards {
		suffix := strings.ToLower(h.Hostname[1:])
		if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
			return h
		}
	}
	return r.any
}

// keep are the allowKeys of a TLS port's connections its hosts allow: a
// connection spliced under a route to a backend the route no longer
// lists is revoked.
func (r *sniRouter) keep() map[string]bool {
	keep := map[string]bool{}
	if r == nil {
		return keep
	}
	add := func(h *TLSHost) {
		for _, b := range h.Backends {
			if !b.Invalid && b.Weight > 0 {
				keep[tlsAllowKey(h, b.Address)] = true
			}
		}
	}
	for _, h := range r.exact {
		add(h)
	}
	for _, h := range r.wildcards {
		add(h)
	}
	if r.any != nil {
		add(r.any)
	}
	return keep
}

// tlsAllowKey is what a TLS connection is tracked by: its route, the
// host, whether TLS ends here, and the backend.
func tlsAllowKey(h *TLSHost, address string) string {
	return fmt.Sprintf("%s\x00%s\x00%t\x00%s", h.Route, h.Hostname, h.Terminate, address)
}

// openTLS is what a TLS port's connection becomes before it is spliced:
// the route's backend, the stream to send it (the client's bytes
// replayed, or TLS terminated over them) and its allowKey. ok false: no
// route takes it, or its handshake failed; the connection is closed.
func (t *tcpForwarder) openTLS(c net.Conn) (client net.Conn, b Backend, key string, ok bool) {
	log := t.p.opts.Log
	ctx, cancel := context.WithTimeout(context.Background(), t.p.settings.Load().requestHeader)
	defer cancel()
	name, head, err := readServerName(ctx, c)
	if err != nil {
		log.V(2).Info("TLS connection closed before routing", "client", c.RemoteAddr().String(), "err", err)
		return nil, Backend{}, "", false
	}
	h := t.s.sni.Load().host(name)
	if h == nil {
		log.V(2).Info("No TLS route for server name", "serverName", name)
		return nil, Backend{}, "", false
	}
	b, ok = pickBackend(h.Backends)
	if !ok {
		log.V(2).Info("TLS route has no valid backend", "route", h.Route, "serverName", name)
		return nil, Backend{}, "", false
	}
	replay := &replayConn{Conn: c, head: head}
	key = tlsAllowKey(h, b.Address)
	if !h.Terminate {
		return replay, b, key, true
	}
	certs := t.s.certs.Load()
	srv := tls.Server(replay, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pickCertificate(*certs, hello.ServerName)
		},
	})
	if err := srv.HandshakeContext(ctx); err != nil {
		log.V(2).Info("TLS handshake failed", "route", h.Route, "serverName", name, "err", err)
		return nil, Backend{}, "", false
	}
	return srv, b, key, true
}
