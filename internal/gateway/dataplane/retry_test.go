package dataplane

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// failing is a backend that answers code to its first n requests and 200
// with the body it was sent after them, counting the requests and checking
// each carried the whole body.
func failing(t *testing.T, code int, n int64, wantBody string) (string, *atomic.Int64) {
	t.Helper()
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if string(got) != wantBody {
			t.Errorf("attempt %d carried %d bytes of body, want %d", seen.Load()+1, len(got), len(wantBody))
		}
		if seen.Add(1) <= n {
			w.WriteHeader(code)
			return
		}
		_, _ = w.Write(got)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &seen
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

func retryRule(backend string, r *gwv1.HTTPRouteRetry) Rule {
	return Rule{Route: "ns/retries", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}, Retry: r}
}

// A request answered with a listed code is sent again, body and all, until
// it succeeds or its attempts are spent; then the backend's own answer
// (not the proxy's) reaches the client. A code not listed is not retried.
func TestRetryOnListedCodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int
		failures int64
		want     int
		seen     int64
	}{
		{name: "succeeds on the third attempt", code: 500, failures: 2, want: 200, seen: 3},
		{name: "attempts spent", code: 500, failures: 4, want: 500, seen: 4},
		{name: "code not listed", code: 503, failures: 2, want: 503, seen: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, seen := failing(t, tc.code, tc.failures, "payload")
			var l loopback
			p := New(l.options())
			t.Cleanup(p.Close)
			reg := prometheus.NewRegistry()
			NewMetrics(reg, p)
			if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
				retryRule(backend, &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{500}, Attempts: ptr.To(3), Backoff: ptr.To(gwv1.Duration("1ms"))}),
			}}}}}}); err != nil {
				t.Fatal(err)
			}
			code, body := post(t, "http://"+l.at(t, "tcp/80")+"/", "payload")
			if code != tc.want || seen.Load() != tc.seen {
				t.Fatalf("answered %d after %d attempts, want %d after %d", code, seen.Load(), tc.want, tc.seen)
			}
			if code == 200 && body != "payload" {
				t.Fatalf("answered %q, want the backend's echo", body)
			}
			if got := testutil.ToFloat64(p.metrics.retries.WithLabelValues("ns/retries", "code")); got != float64(tc.seen-1) {
				t.Fatalf("outrigger_gateway_retries_total{reason=code} = %v, want %d", got, tc.seen-1)
			}
		})
	}
}

// A backend connection that fails (here: closed before any answer) is
// retried under a retry stanza without codes; without a stanza the client
// gets the proxy's 503.
func TestRetryOnConnectionError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	// Every odd connection is closed at once, unanswered.
	go func() { _ = srv.Serve(&flakyListener{Listener: ln, n: &accepted}) }()
	t.Cleanup(func() { _ = srv.Close() })
	for _, tc := range []struct {
		name  string
		retry *gwv1.HTTPRouteRetry
		want  int
	}{
		{name: "no retry stanza", want: http.StatusServiceUnavailable},
		{name: "retried", retry: &gwv1.HTTPRouteRetry{Attempts: ptr.To(1)}, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepted.Store(0)
			_, addr := edgeProxy(t, Limits{}, retryRule(ln.Addr().String(), tc.retry))
			if code, _ := post(t, "http://"+addr+"/", "x"); code != tc.want {
				t.Fatalf("answered %d, want %d", code, tc.want)
			}
		})
	}
}

type flakyListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *flakyListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1)%2 == 1 {
			// Read the request first, so the proxy has sent it.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Read(make([]byte, 512))
			c.Close()
			continue
		}
		return c, nil
	}
}

// Under a retry stanza the backendRequest timeout bounds each attempt: an
// attempt that hangs is cancelled and the request sent again; the request
// timeout still bounds the whole. Without retries, the hanging attempt is
// the answer (504).
func TestRetryAfterBackendTimeout(t *testing.T) {
	var seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	backend := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name  string
		retry *gwv1.HTTPRouteRetry
		want  int
	}{
		{name: "no retry stanza", want: http.StatusGatewayTimeout},
		{name: "retried", retry: &gwv1.HTTPRouteRetry{Attempts: ptr.To(2)}, want: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen.Store(0)
			r := retryRule(backend, tc.retry)
			r.Timeouts = &gwv1.HTTPRouteTimeouts{BackendRequest: ptr.To(gwv1.Duration("200ms")), Request: ptr.To(gwv1.Duration("10s"))}
			_, addr := edgeProxy(t, Limits{}, r)
			if code := get(t, "http://"+addr+"/"); code != tc.want {
				t.Fatalf("answered %d, want %d", code, tc.want)
			}
		})
	}
}

// A body larger than the data plane keeps is streamed once, whole, and its
// request not retried.
func TestRetryLeavesLargeBodiesUnretried(t *testing.T) {
	big := strings.Repeat("b", maxRetryBody+1)
	backend, seen := failing(t, 500, 1, big)
	_, addr := edgeProxy(t, Limits{}, retryRule(backend, &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{500}}))
	if code, _ := post(t, "http://"+addr+"/", big); code != 500 || seen.Load() != 1 {
		t.Fatalf("answered %d after %d attempts, want 500 after 1", code, seen.Load())
	}
}

func TestCheckRetry(t *testing.T) {
	for _, tc := range []struct {
		r    *gwv1.HTTPRouteRetry
		want string
	}{
		{r: nil},
		{r: &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{500, 502, 503, 504}, Attempts: ptr.To(10), Backoff: ptr.To(gwv1.Duration("100ms"))}},
		{r: &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{600}}, want: "retry code 600"},
		{r: &gwv1.HTTPRouteRetry{Attempts: ptr.To(11)}, want: "at most 10"},
		{r: &gwv1.HTTPRouteRetry{Backoff: ptr.To(gwv1.Duration("soon"))}, want: "retry backoff"},
	} {
		err := CheckRetry(tc.r)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRetry(%+v) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

// No retry comes before the backoff the route asked for, and the waits
// grow to at most ten times it (and a quarter of jitter).
func TestRetryWaitHonoursTheBackoff(t *testing.T) {
	p := &retryPolicy{backoff: 100 * time.Millisecond}
	for n := range 8 {
		d := p.wait(n)
		if d < p.backoff || d > 10*p.backoff*5/4 {
			t.Fatalf("wait before retry %d = %v, want between %v and %v", n, d, p.backoff, 10*p.backoff*5/4)
		}
	}
}
