package secureserving

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
)

// newTestServer builds a port on a reserved loopback port that reads no
// client CAs from an API server (none runs here).
func newTestServer(t *testing.T, port int, o Options) *Server {
	t.Helper()
	o.Serving.BindAddress = net.IPv4(127, 0, 0, 1)
	o.Serving.BindPort = port
	o.Serving.PermitPortSharing = true
	o.Authentication.SkipLookup = true
	o.Authorization.AlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}
	s, err := New(context.Background(), o, &rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The probes answer anyone, /readyz follows its checks (added after New),
// /metrics is open with OpenMetrics, an unknown path is a 404, and nothing
// can be added once the port serves.
func TestPortServesProbesAndMetrics(t *testing.T) {
	port := freeport.Reserve(t)
	reg := prometheus.NewRegistry()
	served := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_served_total", Help: "Test."})
	reg.MustRegister(served)
	served.Inc()
	readyz := map[string]healthz.Checker{"ping": healthz.Ping}
	s := newTestServer(t, port, Options{Readyz: readyz, Metrics: reg, OpenMetrics: true})
	var ready atomic.Bool
	readyz["gate"] = func(*http.Request) error {
		if !ready.Load() {
			return errors.New("not yet: plugin at 198.18.0.9 refused")
		}
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	base := "https://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := get(t, base+"/healthz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the port never served /healthz")
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, tc := range []struct {
		path     string
		want     int
		contains string
	}{
		{"/livez", http.StatusOK, "ok"},
		{"/readyz", http.StatusInternalServerError, "gate"},
		{"/readyz/ping", http.StatusOK, "ok"},
		{"/readyz/gate", http.StatusInternalServerError, "reason withheld"},
		{"/metrics", http.StatusOK, "test_served_total 1"},
		{"/no-such-path", http.StatusNotFound, ""},
	} {
		if code, body := get(t, base+tc.path); code != tc.want || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: %d %.200q, want %d containing %q", tc.path, code, body, tc.want, tc.contains)
		}
	}
	// The reason of a failed check is for the log, not for whoever asks.
	for _, p := range []string{"/readyz", "/readyz/gate", "/readyz?verbose"} {
		if _, body := get(t, base+p); strings.Contains(body, "198.18.0.9") || strings.Contains(body, "not yet") {
			t.Errorf("GET %s tells the check's reason: %.200q", p, body)
		}
	}
	ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz once every check passes: %d %.200q", code, body)
	}
	if err := s.AddHandler("/late", http.NotFoundHandler()); err == nil {
		t.Error("a handler was added after the port started")
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start after its context ended: %v", err)
	}
}

// A port already taken is Start's error, not a silent replica without
// probes.
func TestPortTakenIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := newTestServer(t, ln.Addr().(*net.TCPAddr).Port, Options{})
	s.opts.Serving.PermitPortSharing = false
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "listening on the secure port") {
		t.Errorf("Start on a taken port: %v", err)
	}
}

// The clients that ask the API server about callers carry upstream's
// client-side limits (200 a second, bursts of 400), with the main
// kubeconfig and with one of their own.
func TestDelegatedClientsAreLimited(t *testing.T) {
	for _, path := range []string{"", writeKubeconfig(t)} {
		cfg, err := kubeconfigOr(path, &rest.Config{Host: "https://127.0.0.1:1", QPS: -1})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != DelegatedQPS || cfg.Burst != DelegatedBurst || DelegatedQPS != 200 || DelegatedBurst != 400 {
			t.Errorf("kubeconfig %q: QPS %v, burst %d; want upstream's 200, 400", path, cfg.QPS, cfg.Burst)
		}
	}
}

func writeKubeconfig(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/kubeconfig"
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAlwaysAllowed(t *testing.T) {
	d := &delegated{alwaysAllow: []string{"/healthz", "/readyz", "/debug/*"}}
	for path, want := range map[string]bool{
		"/healthz":              true,
		"/healthz/ping":         true,
		"/readyz/informer-sync": true,
		"/livez":                false,
		"/debug/pprof/":         true,
		"/metrics":              false,
		"/healthzz":             false,
	} {
		if got := d.alwaysAllowed(path); got != want {
			t.Errorf("alwaysAllowed(%q) = %v, want %v", path, got, want)
		}
	}
}
