package dataplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"sync"
	"time"
)

// The HTTP/1.1 fast path to plain backends.
//
// net/http's Transport serves each connection with a reading and a writing
// goroutine of its own, which the request's goroutine hands the request to
// and takes the response from; for a request without a body, those
// hand-offs and their allocations cost more than the request's own work
// (the profiles are in docs/performance.md). A GET, HEAD or OPTIONS
// request without a body, to a plain HTTP/1.1 backend, is instead written
// and its answer read on the handler's own goroutine, over a pool of
// keep-alive connections. Every other request (a body, an upgrade, a TLS or
// h2c backend) goes through http.Transport as before. The wire format is
// still net/http's: Request.Write writes the request, http.ReadResponse
// reads the answer and frames its body.

const (
	// upstreamIdleTimeout is how long an idle backend connection is kept,
	// as the Transport's IdleConnTimeout.
	upstreamIdleTimeout = 90 * time.Second
	// upstreamIdlePerHost is how many idle connections a backend address
	// keeps, as the Transport's MaxIdleConnsPerHost.
	upstreamIdlePerHost = 64
	// maxResponseHeaderBytes bounds a backend's response headers, as the
	// Transport's default does: a backend (a tenant's) cannot grow the
	// data plane's memory with endless headers.
	maxResponseHeaderBytes = 10 << 20
	// maxInformational bounds the informational answers (1xx) before the
	// final one, as the Transport does: each is passed on to the client.
	maxInformational = 5
)

// errResponseHeadersTooLarge is a backend's answer over the header bound.
var errResponseHeadersTooLarge = errors.New("backend response headers over 10 MiB")

// fastUpstream is the pool of keep-alive connections of the fast path.
type fastUpstream struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// idleTimeout: upstreamIdleTimeout, shorter in tests.
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*upstreamConn
}

func newFastUpstream(dial func(ctx context.Context, network, address string) (net.Conn, error)) *fastUpstream {
	return &fastUpstream{dial: dial, idleTimeout: upstreamIdleTimeout, idle: map[string][]*upstreamConn{}}
}

// takesFastPath says whether r, as the reverse proxy sends it, can go on
// the fast path: idempotent (sent again on a fresh connection when a
// reused one turns out closed), without a body, not an upgrade.
func takesFastPath(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		return false
	}
	return r.URL.Scheme == "http" && (r.Body == nil || r.Body == http.NoBody) && r.ContentLength == 0 &&
		len(r.TransferEncoding) == 0 && r.Header.Get("Upgrade") == ""
}

// RoundTrip sends r on an idle connection to its backend, or a new one. A
// reused connection that fails before any byte of an answer arrived (the
// backend closed it while idle) is dropped and the request sent once more
// on a new connection, as http.Transport does for idempotent requests.
func (u *fastUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	for {
		c, err := u.get(r.Context(), r.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(r)
		if err == nil {
			return resp, nil
		}
		c.Conn.Close()
		var nothing *nothingReadError
		if !c.reused || !errors.As(err, &nothing) || r.Context().Err() != nil {
			return nil, err
		}
	}
}

// get takes the most recently used idle connection to addr, or dials one.
func (u *fastUpstream) get(ctx context.Context, addr string) (*upstreamConn, error) {
	u.mu.Lock()
	for l := u.idle[addr]; len(l) > 0; l = u.idle[addr] {
		c := l[len(l)-1]
		u.setIdle(addr, l[:len(l)-1])
		// A connection whose idle timer fired is being closed by it.
		if c.timer.Stop() {
			u.mu.Unlock()
			c.reused = true
			return c, nil
		}
	}
	u.mu.Unlock()
	conn, err := u.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upstreamConn{Conn: conn, pool: u, addr: addr}
	c.limit = headerLimit{r: conn, n: -1}
	c.br = bufio.NewReader(&c.limit)
	c.bw = bufio.NewWriter(conn)
	c.timer = time.AfterFunc(u.idleTimeout, c.expire)
	c.timer.Stop()
	return c, nil
}

// put keeps c for the next request, unless its address has enough idle.
func (u *fastUpstream) put(c *upstreamConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := u.idle[c.addr]
	if len(l) >= upstreamIdlePerHost {
		c.Conn.Close()
		return
	}
	u.idle[c.addr] = append(l, c)
	c.timer.Reset(u.idleTimeout)
}

// setIdle keeps the map free of addresses without idle connections, so
// that backends the programming no longer names leave nothing behind.
func (u *fastUpstream) setIdle(addr string, l []*upstreamConn) {
	if len(l) == 0 {
		delete(u.idle, addr)
		return
	}
	u.idle[addr] = l
}

// idleConns counts the idle connections to addr, for tests.
func (u *fastUpstream) idleConns(addr string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.idle[addr])
}

// upstreamConn is one keep-alive connection to a backend.
type upstreamConn struct {
	net.Conn
	pool  *fastUpstream
	addr  string
	limit headerLimit
	br    *bufio.Reader
	bw    *bufio.Writer
	// timer closes the connection once idle for the pool's idle timeout.
	timer *time.Timer
	// reused: the connection served an earlier request.
	reused bool
}

// expire closes an idle connection whose time is up.
func (c *upstreamConn) expire() {
	u := c.pool
	u.mu.Lock()
	l := u.idle[c.addr]
	if i := slices.Index(l, c); i >= 0 {
		u.setIdle(c.addr, slices.Delete(l, i, i+1))
	}
	u.mu.Unlock()
	c.Conn.Close()
}

// nothingReadError is a failure before any byte of the answer arrived.
type nothingReadError struct{ err error }

func (e *nothingReadError) Error() string { return e.err.Error() }
func (e *nothingReadError) Unwrap() error { return e.err }

// aLongTimeAgo is a deadline that has passed: setting it ends every read
// and write in progress on the connection.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes r and reads the answer's headers; the body is read by
// the caller, and the connection goes back to the pool when the body has
// been read to its end and closed. The request's context ending (the
// client gone, a timeout, a revoked route) ends the exchange at once, also
// while the body is read.
func (c *upstreamConn) roundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if err := r.Write(c.bw); err != nil {
		return fail(&nothingReadError{err})
	}
	if err := c.bw.Flush(); err != nil {
		return fail(&nothingReadError{err})
	}
	c.limit.n = maxResponseHeaderBytes
	if _, err := c.br.Peek(1); err != nil {
		return fail(&nothingReadError{err})
	}
	for informational := 0; ; informational++ {
		resp, err := http.ReadResponse(c.br, r)
		if err != nil {
			if errors.Is(err, errResponseHeadersTooLarge) {
				err = errResponseHeadersTooLarge
			}
			return fail(fmt.Errorf("reading the backend's answer: %w", err))
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return fail(errors.New("backend switched protocols unasked"))
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if informational == maxInformational {
				return fail(fmt.Errorf("backend sent more than %d informational answers", maxInformational))
			}
			// An informational answer (103 Early Hints) goes on to the
			// client, as the reverse proxy has it with http.Transport.
			if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.Got1xxResponse != nil {
				if err := trace.Got1xxResponse(resp.StatusCode, textproto.MIMEHeader(resp.Header)); err != nil {
					return fail(err)
				}
			}
			continue
		}
		c.limit.n = -1
		body := &upstreamBody{rc: resp.Body, c: c, stop: stop, reusable: !resp.Close && !r.Close}
		body.eof = resp.Body == http.NoBody
		resp.Body = body
		return resp, nil
	}
}

// upstreamBody is an answer's body; closing it after its end gives the
// connection back to the pool, closing it before closes the connection
// (the rest is not read: it may be long).
type upstreamBody struct {
	rc       io.ReadCloser
	c        *upstreamConn
	stop     func() bool
	reusable bool
	eof      bool
	closed   bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil:
		b.reusable = false
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// A context that ended has poisoned the connection's deadline.
	if !b.stop() {
		b.reusable = false
	}
	// Bytes after the end of the answer are not one: the connection is
	// out of step with its backend.
	if b.eof && b.reusable && b.c.br.Buffered() == 0 {
		b.c.pool.put(b.c)
		return nil
	}
	return b.c.Conn.Close()
}

// headerLimit reads from a connection, at most n bytes while n is not
// negative: set before an answer's headers are read, lifted for its body.
type headerLimit struct {
	r io.Reader
	n int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errResponseHeadersTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	return n, err
}
