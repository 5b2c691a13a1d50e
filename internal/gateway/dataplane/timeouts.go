package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The causes a request's context ends with when the data plane ends it:
// each is answered 504 Gateway Timeout (gRPC: DEADLINE_EXCEEDED).
var (
	errStreamIdle     = errors.New("stream idle timeout")
	errRequestTimeout = errors.New("request timeout")
	errBackendTimeout = errors.New("backend request timeout")
)

// timedOut says whether a request ended because the data plane's own clock
// ended it.
func timedOut(ctx context.Context) bool {
	c := context.Cause(ctx)
	return errors.Is(c, errStreamIdle) || errors.Is(c, errRequestTimeout) || errors.Is(c, errBackendTimeout)
}

// routeTimeouts are an HTTPRoute rule's timeouts, parsed once; zero is
// none.
type routeTimeouts struct {
	request, backend time.Duration
}

// CheckTimeouts says whether the data plane can serve an HTTPRoute rule's
// timeouts: the controller refuses the route otherwise, so that one route
// never makes the data plane refuse a whole configuration.
func CheckTimeouts(t *gwv1.HTTPRouteTimeouts) error {
	_, err := parseTimeouts(t)
	return err
}

func parseTimeouts(t *gwv1.HTTPRouteTimeouts) (routeTimeouts, error) {
	var rt routeTimeouts
	if t == nil {
		return rt, nil
	}
	parse := func(what string, d *gwv1.Duration) (time.Duration, error) {
		if d == nil {
			return 0, nil
		}
		v, err := time.ParseDuration(string(*d))
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%s timeout %q: not a duration", what, *d)
		}
		return v, nil
	}
	var err error
	if rt.request, err = parse("request", t.Request); err != nil {
		return rt, err
	}
	if rt.backend, err = parse("backendRequest", t.BackendRequest); err != nil {
		return rt, err
	}
	return rt, nil
}

// bound ends ctx after the rule's timeouts: the request timeout covers the
// whole exchange, the backend one each request to the backend. Without
// retries there is one, so the shorter applies; with them (retry.go) each
// attempt has its own backend timeout, and only the request's bounds the
// whole.
func (rt routeTimeouts) bound(ctx context.Context, retries bool) (context.Context, context.CancelFunc) {
	switch {
	case retries && rt.request > 0:
		return context.WithTimeoutCause(ctx, rt.request, errRequestTimeout)
	case retries:
	case rt.request > 0 && (rt.backend == 0 || rt.request <= rt.backend):
		return context.WithTimeoutCause(ctx, rt.request, errRequestTimeout)
	case rt.backend > 0:
		return context.WithTimeoutCause(ctx, rt.backend, errBackendTimeout)
	}
	return ctx, func() {}
}

// idleGuard ends a request that moves no byte either way for its timeout:
// a backend that never answers, a client that never reads what it asked
// for. Reads of the body and writes of the answer are the activity. When
// the timeout passes the request's context ends; a write blocked on a
// client that reads nothing is then cut by a write deadline in the past.
// The deadline is set only then, not kept ahead of every write: on an
// HTTP/2 stream each SetWriteDeadline is a message to the connection's
// serving goroutine and a timer of its own, one per request for nothing.
type idleGuard struct {
	timeout time.Duration // the stream idle timeout when the request came
	rc      *http.ResponseController
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	last    atomic.Int64 // unix nanoseconds of the last byte
	// writing is how many writes of the answer are under way.
	writing atomic.Int32

	// mu guards what the timer does against the handler's return: once
	// done, the writer belongs to the connection's next request (HTTP/1)
	// and no deadline may be set on it.
	mu    sync.Mutex
	done  bool
	ended bool // the context was ended for idleness
}

// exchange is what the metrics and the access log learn of one request:
// guardIdle times it and counts what is answered, the router says which
// route and backend served it.
type exchange struct {
	start time.Time
	took  time.Duration
	// route is the route that took the request, "" none; backend the
	// address it was sent to, "" none.
	route, backend string
	// path is the request's path once normalized (escaped, no query);
	// until the router normalizes it, the path as it came.
	path  string
	code  int
	bytes int64
	// end ends the request's context, with a cause: what revokes a request
	// in flight (revoke.go) uses the context the idle guard made rather
	// than one more of its own.
	end context.CancelCauseFunc
}

// guardIdle serves next with the stream idle timeout, and hands done each
// request's exchange once it is answered.
func guardIdle(timeoutNow func() time.Duration, done func(r *http.Request, x *exchange), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The router rewrites the URL the request shares with this one.
		in := *r.URL
		timeout := timeoutNow()
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		g := &idleGuard{timeout: timeout, rc: http.NewResponseController(w), cancel: cancel}
		g.touch()
		g.timer = time.AfterFunc(timeout, g.check)
		defer g.stop()
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &guardedBody{ReadCloser: r.Body, g: g}
		}
		gw := &guardedWriter{ResponseWriter: w, g: g, x: exchange{start: start, end: cancel}}
		// Deferred: an answer cut short (the client gone, a write cut
		// by the idle timeout) ends in the reverse proxy's
		// http.ErrAbortHandler panic, and is counted and logged too.
		defer func() {
			x := &gw.x
			if x.code == 0 {
				x.code = http.StatusOK
			}
			if x.path == "" {
				x.path = in.EscapedPath()
			}
			x.took = time.Since(start)
			done(r, x)
		}()
		next.ServeHTTP(gw, r.WithContext(ctx))
	})
}

func (g *idleGuard) touch() {
	g.last.Store(time.Now().UnixNano())
}

// check runs when the timeout may have passed. The first time the request
// is found idle its context ends (the backend's request is cancelled, the
// client answered 504 if nothing was answered yet); a write found under
// way then, or one still not done a timeout later, is cut.
func (g *idleGuard) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	quiet := time.Since(time.Unix(0, g.last.Load()))
	if quiet < g.timeout {
		g.timer.Reset(g.timeout - quiet)
		return
	}
	if !g.ended {
		g.ended = true
		g.cancel(errStreamIdle)
		if g.writing.Load() == 0 {
			// The answer to the cancelled request still has to be
			// written; it gets a timeout of its own.
			g.timer.Reset(g.timeout)
			return
		}
	}
	// A past deadline fails the blocked write at once (an HTTP/2 stream is
	// reset, an HTTP/1 connection closed); not every writer has one (a
	// test's recorder), and the context has ended either way.
	_ = g.rc.SetWriteDeadline(time.Now().Add(-time.Second))
}

// stop is called when the handler returns.
func (g *idleGuard) stop() {
	g.mu.Lock()
	g.done = true
	g.mu.Unlock()
	g.timer.Stop()
}

type guardedBody struct {
	io.ReadCloser
	g *idleGuard
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.g.touch()
	}
	return n, err
}

type guardedWriter struct {
	http.ResponseWriter
	g *idleGuard
	// x is the request's exchange: the status and bytes answered here,
	// the rest by the router.
	x exchange
}

func (w *guardedWriter) Write(p []byte) (int, error) {
	w.g.touch()
	if w.x.code == 0 {
		w.x.code = http.StatusOK
	}
	w.g.writing.Add(1)
	n, err := w.ResponseWriter.Write(p)
	w.g.writing.Add(-1)
	w.g.touch()
	w.x.bytes += int64(n)
	return n, err
}

// FlushError is the reverse proxy's flush of a streamed answer, a write to
// the client that may block as Write does.
func (w *guardedWriter) FlushError() error {
	w.g.writing.Add(1)
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.g.writing.Add(-1)
	w.g.touch()
	return err
}

func (w *guardedWriter) WriteHeader(code int) {
	w.g.touch()
	if w.x.code == 0 && code >= 200 {
		w.x.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// exchangeOf is the exchange of the request a writer answers, for the
// router to say how it served it; a writer not the guard's (a test's
// recorder) gets one nobody reads.
func exchangeOf(w http.ResponseWriter) *exchange {
	if gw, ok := w.(*guardedWriter); ok {
		return &gw.x
	}
	return &exchange{}
}

// Unwrap lets http.ResponseController (the reverse proxy's flushes,
// WebSocket hijacks) reach the connection's writer.
func (w *guardedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
