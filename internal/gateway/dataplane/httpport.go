package dataplane

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// httpPort serves one HTTP or HTTPS port. An http.Server reads its header
// and idle timeouts from its fields, unguarded, so they cannot change
// while it serves: the port accepts connections once and hands each to
// its current server, and a programming with other timeouts starts a new
// server for the connections to come while the old one finishes those it
// holds (Shutdown: idle ones closed, requests in flight served). The
// change refuses no connection and cuts no request.
type httpPort struct {
	l     net.Listener
	tls   bool
	build func(requestHeader, idle time.Duration) *http.Server
	conns chan net.Conn
	stop  chan struct{}

	mu      sync.Mutex
	cur     *httpServer
	servers map[*httpServer]bool // the current one and those finishing
	closed  bool
}

// httpServer is one generation of a port's server, with the timeouts it
// was made with.
type httpServer struct {
	srv                 *http.Server
	requestHeader, idle time.Duration
}

func newHTTPPort(l net.Listener, tls bool, st settings, build func(requestHeader, idle time.Duration) *http.Server) *httpPort {
	h := &httpPort{l: l, tls: tls, build: build, conns: make(chan net.Conn), stop: make(chan struct{}), servers: map[*httpServer]bool{}}
	h.mu.Lock()
	h.startLocked(st.requestHeader, st.idle)
	h.mu.Unlock()
	go h.accept()
	return h
}

// accept hands each connection to whichever server takes it: the current
// one (an old one may take one it was already waiting for, and serves it).
func (h *httpPort) accept() {
	for {
		c, err := h.l.Accept()
		if err != nil {
			return // closed: the limitedListener retries everything else
		}
		if !h.tls {
			c = &h2cConn{Conn: c}
		}
		select {
		case h.conns <- c:
		case <-h.stop:
			c.Close()
			return
		}
	}
}

func (h *httpPort) startLocked(requestHeader, idle time.Duration) {
	s := &httpServer{srv: h.build(requestHeader, idle), requestHeader: requestHeader, idle: idle}
	ln := &handoff{conns: h.conns, done: make(chan struct{}), addr: h.l.Addr()}
	h.cur, h.servers[s] = s, true
	go func() {
		if h.tls {
			// ServeTLS offers h2 and http/1.1 by ALPN; the certificate
			// comes from GetCertificate.
			_ = s.srv.ServeTLS(ln, "", "")
		} else {
			_ = s.srv.Serve(ln)
		}
	}()
}

// retime serves new connections with these timeouts, if they differ from
// the current server's.
func (h *httpPort) retime(st settings) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.cur.requestHeader == st.requestHeader && h.cur.idle == st.idle {
		return
	}
	old := h.cur
	h.startLocked(st.requestHeader, st.idle)
	go func() {
		_ = old.srv.Shutdown(context.Background())
		h.mu.Lock()
		delete(h.servers, old)
		h.mu.Unlock()
	}()
}

// drain stops accepting and lets every server finish its requests until
// ctx ends, then closes what is left.
func (h *httpPort) drain(ctx context.Context) {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.stop)
	}
	servers := make([]*httpServer, 0, len(h.servers))
	for s := range h.servers {
		servers = append(servers, s)
	}
	h.mu.Unlock()
	_ = h.l.Close()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			_ = s.srv.Shutdown(ctx)
			_ = s.srv.Close()
		})
	}
	wg.Wait()
}

// handoff is one server's listener: the connections the port's accept
// loop hands it, until the server closes it.
type handoff struct {
	conns <-chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *handoff) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoff) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoff) Addr() net.Addr { return l.addr }

// httpServer is an HTTP or HTTPS port's server with these header and idle
// timeouts; the rest of its limits are the process's.
func (p *Proxy) httpServer(s *served, requestHeader, idle time.Duration) *http.Server {
	lim := p.opts.Limits
	srv := &http.Server{
		Handler: guardIdle(func() time.Duration { return p.settings.Load().streamIdle }, func(r *http.Request, x *exchange) {
			p.observe(s.listener, r, x)
		}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.router.Load().serveOn(w, r, &s.flights)
		})),
		ReadHeaderTimeout: requestHeader,
		IdleTimeout:       idle,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         p.conns.connState,
		ErrorLog:          nil,
		Protocols:         listenerProtocols(),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.MaxConcurrentStreams,
			// Envoy's edge windows: 64 KiB a stream, 1 MiB a
			// connection, what one client can make the proxy buffer.
			MaxReceiveBufferPerStream:     64 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
			MaxDecoderHeaderTableSize:     4 << 10,
			MaxEncoderHeaderTableSize:     4 << 10,
			MaxReadFrameSize:              16 << 10,
		},
	}
	if s.protocol == HTTPS {
		srv.TLSConfig = serverTLS(s)
	}
	return srv
}
