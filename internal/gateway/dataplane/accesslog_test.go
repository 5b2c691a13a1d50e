package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// lineWriter is an access log output that hands each line it is written
// to the test, in order.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 1024)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf.Next(i + 1))
	}
}

// next is the next line written; the test fails if none comes within
// the bound (a bound on failure, not a wait for success).
func (w *lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w.lines:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no access log line written")
		return ""
	}
}

// sized is a backend that answers "hello", five bytes.
func sized(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// loggingProxy is a data plane writing its access log to out, programmed
// with accessConfig(s) in front of a sized backend: the proxy, the
// backend's address and the HTTP port's.
func loggingProxy(t *testing.T, out io.Writer, s *Settings) (p *Proxy, backend, addr string) {
	t.Helper()
	backend = sized(t)
	var l loopback
	o := l.options()
	o.AccessLog = out
	p = New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(accessConfig(backend, s)); err != nil {
		t.Fatal(err)
	}
	return p, backend, l.at(t, "tcp/80")
}

func accessConfig(backend string, s *Settings) *Config {
	return &Config{Gateway: "ns/gw", Settings: s, Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Route: "ns/web", Match: gwv1.HTTPRouteMatch{Path: prefix("/web")}, Backends: []Backend{{Address: backend, Weight: 1}}},
	}}}}}}
}

func fetchPath(t *testing.T, url string, header map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// An access log line says which Gateway, listener, route and backend
// served a request, what was asked (method, host, the normalized path)
// and answered (status, bytes, duration), and for whom; it never holds
// the query, a header or a cookie, where secrets travel.
func TestAccessLogLineHasTheFieldsAndNoSecrets(t *testing.T) {
	out := newLineWriter()
	_, backend, addr := loggingProxy(t, out, &Settings{AccessLog: 1})
	fetchPath(t, "http://"+addr+"/web//page?token=s3cret-query", map[string]string{
		"Authorization": "Bearer s3cret-header", "Cookie": "session=s3cret-cookie", "Host": "shop.example.com",
	})
	line := out.next(t)
	if strings.Contains(line, "s3cret") || strings.Contains(line, "token") {
		t.Errorf("line %s holds the query or a header", line)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("line %q is not JSON: %v", line, err)
	}
	for k, want := range map[string]any{
		"gateway": "ns/gw", "listener": "HTTP/80", "route": "ns/web", "method": "GET", "path": "/web/page",
		"status": float64(200), "bytes": float64(5), "upstream": backend,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if got["host"] != "shop.example.com" {
		t.Errorf("host = %v, want the request's", got["host"])
	}
	if c, _ := got["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
		t.Errorf("client = %v, want the peer's address", got["client"])
	}
	if d, ok := got["duration_ms"].(float64); !ok || d < 0 {
		t.Errorf("duration_ms = %v, want a duration", got["duration_ms"])
	}
	if ts, _ := got["time"].(string); ts == "" {
		t.Error("no time")
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("time %q: %v", ts, err)
	}
	if len(got) != 12 {
		t.Errorf("line has %d fields, want the 12 documented: %s", len(got), line)
	}
}

// Off (no setting) writes nothing; turning the log on by a new
// programming takes effect at once, without a restart. The absence is
// shown by order: the first line written is the request made after the
// change, not one of those before it.
func TestAccessLogOffWritesNothingUntilTurnedOn(t *testing.T) {
	out := newLineWriter()
	p, backend, addr := loggingProxy(t, out, nil)
	for range 20 {
		fetchPath(t, "http://"+addr+"/web/off", nil)
	}
	if err := p.Apply(accessConfig(backend, &Settings{AccessLog: 1})); err != nil {
		t.Fatal(err)
	}
	fetchPath(t, "http://"+addr+"/web/on", nil)
	if line := out.next(t); !strings.Contains(line, `"path":"/web/on"`) {
		t.Errorf("first line %s, want the request made once the log was on", line)
	}
}

// A share between 0 and 1 logs about that share of requests, each drawn
// at random (here from a seeded source, so the count is the same every
// run, and still within bounds any fair draw would meet).
func TestAccessLogSamplesTheShare(t *testing.T) {
	for _, tc := range []struct {
		share  float64
		lo, hi int
	}{{0, 0, 0}, {0.01, 50, 150}, {0.5, 4700, 5300}, {1, 10000, 10000}} {
		out := newLineWriter()
		out.lines = make(chan string, 10001)
		a := newAccessLog(out, 10000)
		a.random = rand.New(rand.NewPCG(1, 2)).Float64
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for range 10000 {
			a.log(tc.share, "ns/gw", "HTTP/80", r, &exchange{code: 200, path: "/"})
		}
		a.close()
		if tc.hi > 0 {
			select {
			case <-a.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the writer did not finish")
			}
		}
		if n := len(out.lines); n < tc.lo || n > tc.hi {
			t.Errorf("share %v logged %d of 10000, want %d to %d", tc.share, n, tc.lo, tc.hi)
		}
		if a.dropped.Load() != 0 {
			t.Errorf("share %v dropped %d lines with room for all", tc.share, a.dropped.Load())
		}
	}
}

// blockedWriter is an output that takes nothing until released: a pod
// log nobody reads.
type blockedWriter struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += bytes.Count(p, []byte("\n"))
	return len(p), nil
}

// A slow output costs lines, never requests: they complete while it is
// blocked, the lines beyond the buffer are dropped and counted, and what
// was queued is written once it moves.
func TestAccessLogDropsRatherThanBlocks(t *testing.T) {
	backend := sized(t)
	out := &blockedWriter{release: make(chan struct{})}
	var l loopback
	o := l.options()
	o.AccessLog = out
	p := New(o)
	t.Cleanup(p.Close)
	p.access = newAccessLog(out, 4)
	m := NewMetrics(prometheus.NewRegistry(), p)
	if err := p.Apply(accessConfig(backend, &Settings{AccessLog: 1})); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	const requests = 40
	for range requests {
		fetchPath(t, "http://"+addr+"/web", nil) // each one completes: fetchPath fails the test otherwise
	}
	// The writer holds the lines it took before its write blocked (one,
	// or a few if requests outran it), the buffer four: the rest are
	// dropped.
	dropped := testutil.ToFloat64(m.accessLogs)
	if dropped < 1 {
		t.Errorf("outrigger_gateway_access_log_dropped_total = %v with the output blocked, want lines dropped", dropped)
	}
	close(out.release)
	p.access.close()
	select {
	case <-p.access.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not finish once released")
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.n+int(dropped) != requests {
		t.Errorf("%d lines written and %v dropped, want %d in all", out.n, dropped, requests)
	}
}

// A pod told to stop writes the lines of the requests it served before
// Drain returns (and the process exits).
func TestAccessLogDrainWritesWhatIsQueued(t *testing.T) {
	out := newLineWriter()
	p, _, addr := loggingProxy(t, out, &Settings{AccessLog: 1})
	for range 10 {
		fetchPath(t, "http://"+addr+"/web", nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Drain(ctx)
	if n := len(out.lines); n != 10 {
		t.Errorf("%d lines written when Drain returned, want 10", n)
	}
}
