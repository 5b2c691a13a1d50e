package dataplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Options say where the proxy listens and how it reaches backends.
type Options struct {
	// ListenTCP opens a TCP port. Default: every address at that port.
	ListenTCP func(port int32) (net.Listener, error)
	// ListenUDP opens a UDP port. Default: every address at that port.
	ListenUDP func(port int32) (net.PacketConn, error)
	// Dial reaches a backend address. Default: net.Dialer with a 5 s
	// timeout.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// UDPIdle is how long a UDP flow without packets keeps its backend.
	// Default 60 s.
	UDPIdle time.Duration
	// RevokeGrace is how long a request in flight goes on once a new
	// programming no longer allows its route and backend (revoke.go).
	// Default: revokeGrace.
	RevokeGrace time.Duration
	// Limits bound what clients can hold (limits.go); zero fields take
	// their defaults.
	Limits Limits
	Log    logr.Logger
	// AccessLog is where access log lines go, when the settings ask for
	// them (accesslog.go). Default: standard output (the process's own
	// log goes to standard error).
	AccessLog io.Writer
}

// Proxy serves one Gateway's Config; Apply reprograms it in place.
type Proxy struct {
	opts    Options
	reverse *httputil.ReverseProxy
	// backends reach the backends, under the reverse proxy's retries.
	backends *backendTransport
	// mirrors sends the rules' mirrored requests (mirror.go).
	mirrors *mirrorer
	conns   *connTable
	// metrics, when NewMetrics registered them; nil counts nothing.
	metrics *Metrics
	// access writes the access log lines the settings ask for.
	access *accessLog
	// settings are the timeouts and trusted hops served now: the Limits',
	// with the programming's settings over them.
	settings atomic.Pointer[settings]

	mu     sync.Mutex
	ports  map[portKey]*served
	closed bool
}

type portKey struct {
	port int32
	udp  bool
}

// served is one open port; its programming is swapped atomically.
type served struct {
	protocol Protocol
	// listener is the port's listenerName, for the metrics.
	listener string
	router   atomic.Pointer[router]
	certs    atomic.Pointer[[]certificate]
	// clientAuth is an HTTPS port's check of client certificates (nil
	// inside: none).
	clientAuth atomic.Pointer[clientAuth]
	backends   atomic.Pointer[[]Backend]
	close      func()
	// drain stops accepting and lets what is in flight finish until ctx
	// ends, then closes.
	drain func(ctx context.Context)
	// relay is a UDP port's flows, for tests.
	relay *udpRelay
	// flights are an HTTP port's requests in flight, tcp a TCP port's
	// forwarder: what a change of programming may have to revoke.
	flights flights
	tcp     *tcpForwarder
	// http is an HTTP or HTTPS port's servers, which a change of the
	// header or idle timeout renews.
	http *httpPort
	// sni is a TLS port's routes by server name.
	sni atomic.Pointer[sniRouter]
}

type certificate struct {
	hostname string
	cert     *tls.Certificate
}

// New returns a proxy serving nothing yet.
func New(o Options) *Proxy {
	if o.ListenTCP == nil {
		o.ListenTCP = func(port int32) (net.Listener, error) {
			return ListenTCP(fmt.Sprintf(":%d", port))
		}
	}
	if o.ListenUDP == nil {
		o.ListenUDP = func(port int32) (net.PacketConn, error) {
			return net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		}
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: 5 * time.Second}
		o.Dial = d.DialContext
	}
	if o.RevokeGrace <= 0 {
		o.RevokeGrace = revokeGrace
	}
	if o.UDPIdle <= 0 {
		o.UDPIdle = time.Minute
	}
	if o.AccessLog == nil {
		o.AccessLog = os.Stdout
	}
	o.Limits = o.Limits.withDefaults()
	p := &Proxy{opts: o, ports: map[portKey]*served{}, conns: newConnTable(o.Limits.MaxConnections), access: newAccessLog(o.AccessLog, accessLogBuffer)}
	st := settingsOf(o.Limits, nil)
	p.settings.Store(&st)
	backends := newBackendTransport(o.Dial)
	p.backends = backends
	p.reverse = &httputil.ReverseProxy{
		Transport: &retryTransport{next: backends, retried: func(route, why string) { p.metrics.retry(route, why) }},
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := targetOf(pr.In.Context())
			pr.Out.URL.Scheme = "http"
			if t.tls != nil {
				pr.Out.URL.Scheme = "https"
			}
			pr.Out.URL.Host = t.address
			setForwarded(pr, p.settings.Load().trustedHops)
		},
		ModifyResponse: func(resp *http.Response) error {
			t := targetOf(resp.Request.Context())
			if t.cors != nil {
				stripCORS(resp.Header)
			}
			for _, m := range t.respMods {
				modifyHeaders(resp.Header, m)
			}
			if t.cors != nil && t.cors.exposeAll {
				if names := exposeAllOf(resp.Header); names != "" {
					resp.Header.Set("Access-Control-Expose-Headers", names)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.Log.V(2).Info("Backend failed", "address", targetOf(r.Context()).address, "err", err)
			t := targetOf(r.Context())
			p.metrics.upstreamError(t.listener, t.route)
			// The request's own clock ended it, or the last attempt's
			// backend timeout (retry.go).
			if cause := context.Cause(r.Context()); timedOut(r.Context()) || errors.Is(err, errBackendTimeout) {
				if !timedOut(r.Context()) {
					cause = errBackendTimeout
				}
				if isGRPC(r) {
					grpcError(w, grpcDeadlineExceeded, cause.Error())
					return
				}
				http.Error(w, cause.Error(), http.StatusGatewayTimeout)
				return
			}
			if isGRPC(r) {
				grpcError(w, grpcUnavailable, "backend unreachable")
				return
			}
			http.Error(w, "backend unreachable", http.StatusServiceUnavailable)
		},
		ErrorLog:   nil,
		BufferPool: &copyBuffers,
	}
	p.mirrors = newMirrorer(backends, o.Limits, func() int { return p.settings.Load().trustedHops }, o.Log)
	return p
}

type targetKey struct{}

type target struct {
	// listener is the port's listenerName, for the metrics.
	listener string
	route    string
	address  string
	h2c      bool
	// tls: the backend is reached over TLS (backendtls.go); nil, plain.
	tls      *backendTLSConn
	respMods []*gwv1.HTTPHeaderFilter
	// cors is the answer of the rule's CORS filter, whose headers are set
	// on the response already; nil without one.
	cors *corsAnswer
	// retry is the rule's retry stanza; nil, the request is sent once.
	retry *retryPolicy
}

func withTarget(ctx context.Context, t target) context.Context {
	return context.WithValue(ctx, targetKey{}, t)
}

func targetOf(ctx context.Context) target {
	t, _ := ctx.Value(targetKey{}).(target)
	return t
}

// Apply programs the proxy with cfg: ports no longer listed close, new ones
// open, the others switch to the new programming without dropping
// connections. On an error nothing changes.
func (p *Proxy) Apply(cfg *Config) error {
	want, err := compileConfig(cfg, p.reverse)
	if err != nil {
		return err
	}
	st := settingsOf(p.opts.Limits, cfg.Settings)
	st.gateway = cfg.Gateway
	for _, c := range want {
		if c.router != nil {
			c.router.mirrors = p.mirrors
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("proxy closed")
	}
	// New ports open first, while the old programming still serves: a
	// port that cannot open (taken, no descriptors) leaves everything as
	// it was, and the error says which. A port whose protocol changes
	// (HTTP to HTTPS on one number) must close before it reopens.
	opened := map[portKey]*served{}
	// The settings are in place before a new port opens, so that its
	// first connection is read as they say (a PROXY protocol header
	// above all); undone with the ports if one cannot open.
	prev := p.settings.Load()
	p.settings.Store(&st)
	undo := func() {
		for _, s := range opened {
			s.close()
		}
		p.settings.Store(prev)
	}
	for k, c := range want {
		if s, ok := p.ports[k]; ok {
			if s.protocol == c.port.Protocol {
				continue
			}
			s.close()
			delete(p.ports, k)
		}
		s := &served{protocol: c.port.Protocol, listener: listenerName(c.port.Protocol, k.port)}
		s.router.Store(c.router)
		s.certs.Store(&c.certs)
		s.clientAuth.Store(c.clientAuth)
		s.backends.Store(&c.backends)
		s.sni.Store(c.sni)
		if err := p.open(k, s, st); err != nil {
			undo()
			return err
		}
		opened[k] = s
	}
	for k, c := range want {
		if s, ok := opened[k]; ok {
			p.ports[k] = s
			continue
		}
		if s := p.ports[k]; s.http != nil {
			s.http.retime(st)
		}
		s := p.ports[k]
		s.router.Store(c.router)
		s.certs.Store(&c.certs)
		s.clientAuth.Store(c.clientAuth)
		s.backends.Store(&c.backends)
		s.sni.Store(c.sni)
		s.flights.revoke(c.router, p.opts.RevokeGrace)
		switch {
		case s.tcp != nil && s.protocol == TLS:
			s.tcp.revoke(c.sni.keep())
		case s.tcp != nil:
			s.tcp.revoke(keepTCP(c.backends))
		}
	}
	for k, s := range p.ports {
		if _, ok := want[k]; !ok {
			s.close()
			delete(p.ports, k)
		}
	}
	keepTLS := map[string]bool{}
	for _, c := range want {
		if c.router != nil {
			for _, k := range c.router.tlsKeys {
				keepTLS[k] = true
			}
		}
	}
	p.backends.retainTLS(keepTLS)
	return nil
}

// Drain stops every port gracefully, as a pod that is told to stop does:
// no new connection is accepted, requests and TCP connections in flight
// may finish until ctx ends, then everything left is closed.
func (p *Proxy) Drain(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	ports := p.ports
	p.ports = map[portKey]*served{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ports {
		wg.Go(func() { s.drain(ctx) })
	}
	wg.Wait()
	p.access.flush(ctx)
}

// observe records a request's outcome in the metrics (when registered)
// and, when the settings draw it, in the access log.
func (p *Proxy) observe(listener string, r *http.Request, x *exchange) {
	p.metrics.observe(listener, x.route, x.code, x.took)
	if st := p.settings.Load(); st.accessLog > 0 {
		p.access.log(st.accessLog, st.gateway, listener, r, x)
	}
}

// Close stops every port.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, s := range p.ports {
		s.close()
		delete(p.ports, k)
	}
	p.access.close()
}

func (p *Proxy) open(k portKey, s *served, st settings) error {
	switch s.protocol {
	case UDP:
		pc, err := p.opts.ListenUDP(k.port)
		if err != nil {
			return fmt.Errorf("listening on UDP port %d: %w", k.port, err)
		}
		u := &udpRelay{conn: pc, s: s, p: p, flows: map[string]*udpFlow{}}
		s.close, s.relay = u.close, u
		s.drain = func(context.Context) { u.close() }
		go u.serve()
		return nil
	}
	raw, err := p.opts.ListenTCP(k.port)
	if err != nil {
		return fmt.Errorf("listening on TCP port %d: %w", k.port, err)
	}
	// Every TCP-based port reads a PROXY protocol header first when the
	// settings ask for it; UDP above never does.
	l := &proxyListener{Listener: &limitedListener{Listener: raw, t: p.conns}, p: p}
	switch s.protocol {
	case TCP, TLS:
		t := &tcpForwarder{l: l, s: s, p: p, conns: map[net.Conn]string{}}
		t.open = t.openTCP
		if s.protocol == TLS {
			t.open = t.openTLS
		}
		s.close, s.drain, s.tcp = t.close, t.drain, t
		go t.serve()
	default:
		h := newHTTPPort(l, s.protocol == HTTPS, st, func(requestHeader, idle time.Duration) *http.Server {
			return p.httpServer(s, requestHeader, idle)
		})
		s.http = h
		// Draining closes the listener and idle connections, and waits
		// for requests in flight; what is left when ctx ends is cut.
		s.drain = h.drain
		s.close = func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h.drain(ctx)
		}
	}
	return nil
}

// loadCertificates parses a port's certificates.
func loadCertificates(port Port) ([]certificate, error) {
	var out []certificate
	for _, pc := range port.Certificates {
		cert, err := tls.X509KeyPair(pc.CertPEM, pc.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("port %d: certificate for %q: %w", port.Port, pc.Hostname, err)
		}
		out = append(out, certificate{hostname: strings.ToLower(pc.Hostname), cert: &cert})
	}
	return out, nil
}

// pickCertificate chooses by SNI, as the listener is chosen
// (mostSpecific): exact hostname, then the longest wildcard, then the
// certificate for any host; no other.
func pickCertificate(certs []certificate, name string) (*tls.Certificate, error) {
	if i, ok := mostSpecific(len(certs), func(i int) string { return certs[i].hostname }, name); ok {
		return certs[i].cert, nil
	}
	// No listener serves this name: the handshake fails rather than
	// showing a certificate that names another listener's hosts.
	return nil, fmt.Errorf("no certificate for server name %q", strings.ToLower(name))
}

// pickBackend chooses a valid backend by weight.
func pickBackend(bs []Backend) (Backend, bool) {
	i, ok := pickBackendAt(bs)
	if !ok {
		return Backend{}, false
	}
	return bs[i], true
}

// pickBackendAt is the index of the backend pickBackend chooses.
func pickBackendAt(bs []Backend) (int, bool) {
	var total int64
	for _, b := range bs {
		total += int64(max(b.Weight, 0))
	}
	if total == 0 {
		return 0, false
	}
	n := rand.Int64N(total)
	for i, b := range bs {
		w := int64(max(b.Weight, 0))
		if n < w {
			return i, !b.Invalid
		}
		n -= w
	}
	return 0, false
}

// tcpForwarder serves a TCP port, and a TLS port, whose connections are
// spliced to a backend once open has chosen it.
type tcpForwarder struct {
	l net.Listener
	s *served
	p *Proxy
	// open chooses a connection's backend and what to splice to it (the
	// connection itself, or TLS ended over it), with the key revoke
	// knows it by; not ok: the connection is closed.
	open func(c net.Conn) (client net.Conn, b Backend, key string, ok bool)

	mu sync.Mutex
	// conns are the client and backend connections; a client's value is
	// the key it was spliced under (open's), once it was.
	conns map[net.Conn]string
	done  bool
}

func (t *tcpForwarder) serve() {
	for {
		c, err := t.l.Accept()
		if err != nil {
			return
		}
		if !t.track(c, true) {
			c.Close()
			return
		}
		go t.handle(c)
	}
}

func (t *tcpForwarder) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if add {
		if t.done {
			return false
		}
		t.conns[c] = ""
		return true
	}
	delete(t.conns, c)
	return true
}

func (t *tcpForwarder) handle(c net.Conn) {
	defer t.track(c, false)
	defer c.Close()
	// Until its route is chosen (a TLS port reading the ClientHello), a
	// connection may be closed to make room for another, as an idle HTTP
	// one; from then on it is in use, never the one closed.
	if pc, ok := c.(*proxyConn); ok {
		// The header first, before a backend is chosen or dialled:
		// a connection without one is closed having cost nothing.
		if pc.handshake() != nil {
			return
		}
	}
	client, b, key, ok := t.open(c)
	if !ok {
		return
	}
	if tc, ok := trackedOf(c); ok {
		tc.t.busy(tc)
		keepAlive(tc.Conn)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := t.p.opts.Dial(ctx, "tcp", b.Address)
	cancel()
	if err != nil {
		t.p.opts.Log.V(2).Info("Backend unreachable", "address", b.Address, "err", err)
		return
	}
	t.trackUpstream(c, key)
	if !t.track(up, true) {
		up.Close()
		return
	}
	defer t.track(up, false)
	defer up.Close()
	splice(client, up, t.p.settings.Load().tcpIdle)
}

// openTCP is a TCP port's open: a backend by weight, the connection as it
// is.
func (t *tcpForwarder) openTCP(c net.Conn) (net.Conn, Backend, string, bool) {
	b, ok := pickBackend(*t.s.backends.Load())
	return c, b, b.Address, ok
}

// splice copies both ways until each side has finished sending, or until
// neither has sent a byte for idle: the connection's last activity is
// shared by both directions, so a one-way stream is not idle.
func splice(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := copyBuffers.Get()
		defer copyBuffers.Put(buf)
		var deadline time.Time
		for {
			// The deadline moves once half of it is spent, not on
			// every read.
			if now := time.Now(); now.After(deadline.Add(-idle / 2)) {
				deadline = now.Add(idle)
				_ = src.SetReadDeadline(deadline)
			}
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
					continue // the other direction is alive
				}
				if errors.As(err, &ne) && ne.Timeout() {
					// Idle both ways: end the whole connection.
					a.Close()
					b.Close()
					return
				}
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				return
			}
		}
	}
	go pipe(b, a)
	go pipe(a, b)
	<-done
	<-done
}

// drain stops accepting and waits for the connections to end by
// themselves until ctx ends.
func (t *tcpForwarder) drain(ctx context.Context) {
	t.l.Close()
	for {
		t.mu.Lock()
		n := len(t.conns)
		t.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.close()
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.close()
}

func (t *tcpForwarder) close() {
	t.l.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	for c := range t.conns {
		c.Close()
	}
}
