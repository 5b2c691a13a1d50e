package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// accessLogBuffer is how many lines may wait for the output: about a
// second of a busy data plane's requests. More are dropped, not waited
// for, so that a slow reader of the pod's log never slows a request.
const accessLogBuffer = 4096

// accessLine is one request's access log line. It holds nothing a
// request carries that may be a secret: no header, no cookie, no query
// (tokens travel there); the path is kept, without its query.
type accessLine struct {
	Time     string `json:"time"`
	Gateway  string `json:"gateway"`
	Listener string `json:"listener"`
	Route    string `json:"route"`
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	Bytes    int64  `json:"bytes"`
	// DurationMS is the time from the request's headers to the end of
	// its answer, in milliseconds (fractions kept).
	DurationMS float64 `json:"duration_ms"`
	// Upstream is the backend's address the request was sent to, "" when
	// the data plane answered it itself (no route, a redirect, CORS).
	Upstream string `json:"upstream"`
	// Client is the peer's address: the client's own when the load
	// balancer keeps it or sends the PROXY protocol.
	Client string `json:"client"`
}

// accessLog writes access log lines, JSON one a line, from a goroutine of
// its own: a request only encodes its line and queues it, or drops it
// when the queue is full.
type accessLog struct {
	out   io.Writer
	lines chan []byte
	// random draws a request's chance against the sampled share, in
	// [0, 1); tests make it deterministic.
	random  func() float64
	dropped atomic.Uint64

	start   sync.Once // the writer starts with the first line
	started atomic.Bool
	stop    chan struct{}
	once    sync.Once
	// done is closed when the writer has written what was queued at
	// close.
	done chan struct{}
}

func newAccessLog(out io.Writer, buffer int) *accessLog {
	return &accessLog{out: out, lines: make(chan []byte, buffer), random: rand.Float64, stop: make(chan struct{}), done: make(chan struct{})}
}

// log writes a line for a request when it is drawn: share is the
// settings' (0 none, 1 every one).
func (a *accessLog) log(share float64, gateway, listener string, r *http.Request, x *exchange) {
	if share <= 0 || share < 1 && a.random() >= share {
		return
	}
	line, err := json.Marshal(accessLine{
		Time:       x.start.UTC().Format(time.RFC3339Nano),
		Gateway:    gateway,
		Listener:   listener,
		Route:      x.route,
		Method:     r.Method,
		Host:       r.Host,
		Path:       x.path,
		Status:     x.code,
		Bytes:      x.bytes,
		DurationMS: float64(x.took.Microseconds()) / 1000,
		Upstream:   x.backend,
		Client:     r.RemoteAddr,
	})
	if err != nil {
		return // strings and numbers only: cannot fail
	}
	a.start.Do(func() {
		a.started.Store(true)
		go a.write()
	})
	select {
	case a.lines <- append(line, '\n'):
	default:
		a.dropped.Add(1)
	}
}

// write copies the queued lines to the output until close, in batches:
// as many as are queued, then one write.
func (a *accessLog) write() {
	defer close(a.done)
	w := bufio.NewWriterSize(a.out, 64<<10)
	for {
		select {
		case l := <-a.lines:
			_, _ = w.Write(l)
			for len(a.lines) > 0 && w.Buffered() < 32<<10 {
				_, _ = w.Write(<-a.lines)
			}
			// An output that fails (a closed stdout) loses its lines;
			// nothing here can do better.
			_ = w.Flush()
		case <-a.stop:
			for len(a.lines) > 0 {
				_, _ = w.Write(<-a.lines)
			}
			_ = w.Flush()
			return
		}
	}
}

// close stops the writer once it has written what is queued; lines
// logged after are dropped when the queue is full.
func (a *accessLog) close() {
	a.once.Do(func() { close(a.stop) })
}

// flush closes, and waits until what is queued is written or ctx ends:
// a stopping pod's last lines are not lost with its process.
func (a *accessLog) flush(ctx context.Context) {
	a.close()
	if !a.started.Load() {
		return
	}
	select {
	case <-a.done:
	case <-ctx.Done():
	}
}
