package dataplane

import (
	"container/list"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what one client can hold of a data plane: each is a cost a
// client chooses (how slowly it sends, how much it sends, how many
// connections it keeps), so each has a ceiling, and reaching a ceiling
// costs the client that reached it, not the others. The defaults follow
// Envoy's edge recommendations, tightened where a Go server holds more per
// connection than Envoy does (docs/gateway.md, "The edge"). The four
// timeouts are defaults: a programming's Settings (a Gateway's
// parametersRef) replace them while it applies (settings.go).
type Limits struct {
	// RequestHeaderTimeout: a connection has this long to send a request's
	// headers (slowloris), also its first. Default 10 s.
	RequestHeaderTimeout time.Duration
	// IdleTimeout: a keep-alive connection with no request in flight is
	// closed after this. Default 60 s.
	IdleTimeout time.Duration
	// StreamIdleTimeout: a request (HTTP, gRPC stream, WebSocket before its
	// upgrade) that moves no byte either way for this long ends: a backend
	// that never answers, a client that never reads. Default 5 min.
	StreamIdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. Default 60 KiB.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds an HTTP/2 connection's streams. Default 100.
	MaxConcurrentStreams int
	// MaxConnections bounds the client connections of the data plane's
	// HTTP and TCP ports together. At the limit a new connection takes
	// the place of the longest-waiting one that has no request in flight
	// (the idle pay for the flood, not the next client), and is closed
	// when every connection is busy. Default 16,384.
	MaxConnections int
	// TCPIdleTimeout: a TCP route's connection that moves no byte either
	// way for this long is closed. Default 1 h.
	TCPIdleTimeout time.Duration
	// MaxUDPFlows bounds the UDP flows (one per client address) of each
	// UDP port; at the limit the flow that has been quiet longest makes
	// room. Default 4,096.
	MaxUDPFlows int
	// MaxMirrors bounds the mirrored requests (RequestMirror) in flight
	// or waiting for their body, each holding at most 64 KiB of it; a
	// mirror finding none free is dropped. Default 256.
	MaxMirrors int
	// MirrorTimeout bounds a mirrored request, its answer included.
	// Default 10 s.
	MirrorTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defi := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.RequestHeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, time.Minute)
	def(&l.StreamIdleTimeout, 5*time.Minute)
	def(&l.TCPIdleTimeout, time.Hour)
	defi(&l.MaxHeaderBytes, 60<<10)
	defi(&l.MaxConcurrentStreams, 100)
	defi(&l.MaxConnections, 16384)
	defi(&l.MaxUDPFlows, 4096)
	defi(&l.MaxMirrors, 256)
	def(&l.MirrorTimeout, 10*time.Second)
	return l
}

// connTable counts a data plane's client connections against
// MaxConnections, keeping those with no request in flight in the order
// they became so, the oldest first to make room.
type connTable struct {
	max int

	mu      sync.Mutex
	n       int
	waiting *list.List // of net.Conn: no request in flight
	where   map[*trackedConn]*list.Element

	evicted, refused atomic.Int64
}

func newConnTable(max int) *connTable {
	return &connTable{max: max, waiting: list.New(), where: map[*trackedConn]*list.Element{}}
}

// admit counts a new connection, making room by closing the oldest waiting
// one when full; false: every connection is busy, c must be closed.
func (t *connTable) admit(c *trackedConn) bool {
	t.mu.Lock()
	var victim *trackedConn
	if t.n >= t.max {
		front := t.waiting.Front()
		if front == nil {
			t.mu.Unlock()
			t.refused.Add(1)
			return false
		}
		victim = front.Value.(*trackedConn)
		t.remove(victim)
		victim.counted = false
		t.n--
	}
	t.n++
	c.counted = true
	t.where[c] = t.waiting.PushBack(c)
	t.mu.Unlock()
	if victim != nil {
		t.evicted.Add(1)
		victim.Close()
	}
	return true
}

// count is how many connections are counted now.
func (t *connTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// busy marks c as serving a request (not to be closed to make room).
func (t *connTable) busy(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.remove(c)
}

// idle marks c as waiting for a request again.
func (t *connTable) idle(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, waiting := t.where[c]; waiting || !c.counted {
		return
	}
	t.where[c] = t.waiting.PushBack(c)
}

// gone forgets c. Only connections still counted lower the count: an
// evicted one was already taken off.
func (t *connTable) gone(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !c.counted {
		return
	}
	c.counted = false
	t.remove(c)
	t.n--
}

func (t *connTable) remove(c *trackedConn) {
	if e, ok := t.where[c]; ok {
		t.waiting.Remove(e)
		delete(t.where, c)
	}
}

// trackedConn is a client connection counted in a connTable.
type trackedConn struct {
	net.Conn
	t *connTable
	// counted is guarded by t.mu.
	counted bool
}

func (c *trackedConn) Close() error {
	c.t.gone(c)
	return c.Conn.Close()
}

// limitedListener admits each accepted connection into a connTable and
// keeps accepting through transient errors (EMFILE, ENFILE, ECONNABORTED),
// backing off, so a descriptor shortage pauses a port rather than leaving
// it bound and dead.
type limitedListener struct {
	net.Listener
	t *connTable
}

func (l *limitedListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		tc := &trackedConn{Conn: c, t: l.t}
		if !l.t.admit(tc) {
			c.Close()
			continue
		}
		return tc, nil
	}
}

// temporary says whether an Accept error passes: anything but the listener
// being closed (descriptor exhaustion, a connection reset before it was
// accepted).
func temporary(err error) bool {
	return !errors.Is(err, net.ErrClosed)
}

// connState keeps a connTable's view of an HTTP connection's requests.
func (t *connTable) connState(c net.Conn, s http.ConnState) {
	tc, ok := trackedOf(c)
	if !ok {
		return
	}
	switch s {
	case http.StateActive, http.StateHijacked:
		t.busy(tc)
	case http.StateIdle:
		t.idle(tc)
	}
}

// trackedOf is the counted connection under c: c itself, or below the
// wrappers over it (a *tls.Conn, a PROXY protocol reader, a replay).
func trackedOf(c net.Conn) (*trackedConn, bool) {
	for {
		if tc, ok := c.(*trackedConn); ok {
			return tc, true
		}
		n, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = n.NetConn()
	}
}
