package dataplane

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// headerRecorder is a backend that sends each request's header on seen.
func headerRecorder(t *testing.T, seen chan<- http.Header) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// What a backend learns of the client follows the trusted hops: with none,
// the X-Forwarded-For, X-Real-IP and X-Forwarded-Proto a client sends are
// replaced by what the data plane saw (Forwarded is dropped); with trusted hops, the
// entries those proxies appended are kept (and only those), the first the
// client; a request with fewer entries than trusted hops vouches for
// nothing.
func TestForwardedHeadersFollowTrustedHops(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hops      int
		sent      map[string][]string
		xff, real string
		proto     string
	}{
		{name: "no header, no hops", xff: "127.0.0.1", real: "127.0.0.1", proto: "http"},
		{name: "a client's claims, no hops",
			sent: map[string][]string{"X-Forwarded-For": {"198.18.7.7"}, "X-Real-Ip": {"198.18.7.7"}, "X-Forwarded-Proto": {"https"}, "Forwarded": {"for=198.18.7.7"}},
			xff:  "127.0.0.1", real: "127.0.0.1", proto: "http"},
		{name: "one trusted hop", hops: 1,
			sent: map[string][]string{"X-Forwarded-For": {"203.0.113.66, 198.18.7.7"}, "X-Forwarded-Proto": {"https"}, "Forwarded": {"for=198.18.7.7"}},
			xff:  "198.18.7.7, 127.0.0.1", real: "198.18.7.7", proto: "https"},
		{name: "two trusted hops, the header on two lines", hops: 2,
			sent: map[string][]string{"X-Forwarded-For": {"203.0.113.66, 198.18.7.7", "198.18.7.9"}},
			xff:  "198.18.7.7, 198.18.7.9, 127.0.0.1", real: "198.18.7.7", proto: "http"},
		{name: "fewer entries than trusted hops", hops: 2,
			sent: map[string][]string{"X-Forwarded-For": {"198.18.7.7"}, "X-Forwarded-Proto": {"https"}},
			xff:  "127.0.0.1", real: "127.0.0.1", proto: "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan http.Header, 1)
			rule := Rule{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: headerRecorder(t, seen), Weight: 1}}}
			p, addr := edgeProxy(t, Limits{}, rule)
			if err := p.Apply(&Config{Settings: &Settings{TrustedHops: tc.hops}, Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{rule}}}}}}); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
			for k, vs := range tc.sent {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			h := <-seen
			if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != tc.xff {
				t.Errorf("X-Forwarded-For %q, want %q", got, tc.xff)
			}
			if got := h.Values("X-Real-Ip"); len(got) != 1 || got[0] != tc.real {
				t.Errorf("X-Real-IP %q, want %q", got, tc.real)
			}
			if got := h.Get("X-Forwarded-Proto"); got != tc.proto {
				t.Errorf("X-Forwarded-Proto %q, want %q", got, tc.proto)
			}
			if got := h.Get("Forwarded"); got != "" {
				t.Errorf("Forwarded %q reached the backend", got)
			}
		})
	}
}

// A request header timeout the programming gives takes effect on a port
// already open: a slowloris connection made after the change is closed
// after the programmed 300 ms, not the default 10 s, while a request in
// flight across the change is answered (the old server finishes it).
func TestProgrammedRequestHeaderTimeoutTakesEffect(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	held := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	t.Cleanup(held.Close)
	rules := []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: strings.TrimPrefix(held.URL, "http://"), Weight: 1}}}}
	p, addr := edgeProxy(t, Limits{}, rules...)
	inFlight := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			inFlight <- 0
			return
		}
		resp.Body.Close()
		inFlight <- resp.StatusCode
	}()
	<-arrived
	if err := p.Apply(&Config{Settings: &Settings{RequestHeaderTimeout: 300 * time.Millisecond},
		Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}}}}); err != nil {
		t.Fatal(err)
	}
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "GET / HTTP/1.1\r\nHost: a\r\nX-Slow: 1")
	start := time.Now()
	_ = slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(slow); err != nil {
		t.Fatalf("the slow connection was not closed by the programmed timeout: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the slow connection was closed after %v, want about 300 ms", took)
	}
	close(release)
	if code := <-inFlight; code != http.StatusOK {
		t.Fatalf("the request in flight across the change: %d, want 200", code)
	}
}

// A programming's settings replace the Limits' timeouts one by one; no
// settings serve as the Limits say.
func TestSettingsOfKeepsLimitsUnlessGiven(t *testing.T) {
	lim := Limits{}.withDefaults()
	if got, want := settingsOf(lim, nil), (settings{requestHeader: 10 * time.Second, idle: time.Minute, streamIdle: 5 * time.Minute, tcpIdle: time.Hour}); got != want {
		t.Errorf("no settings: %+v, want %+v", got, want)
	}
	got := settingsOf(lim, &Settings{IdleTimeout: 2 * time.Minute, TrustedHops: 99})
	if want := (settings{requestHeader: 10 * time.Second, idle: 2 * time.Minute, streamIdle: 5 * time.Minute, tcpIdle: time.Hour, trustedHops: MaxTrustedHops}); got != want {
		t.Errorf("some settings: %+v, want %+v", got, want)
	}
}

// A stream idle timeout the programming gives ends a hanging backend's
// request (504) after it, not after the default 5 min.
func TestProgrammedStreamIdleTimeoutTakesEffect(t *testing.T) {
	backend, ended := hanging(t)
	rules := []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}}}}
	p, addr := edgeProxy(t, Limits{}, rules...)
	if err := p.Apply(&Config{Settings: &Settings{StreamIdleTimeout: time.Second},
		Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}}}}); err != nil {
		t.Fatal(err)
	}
	if code := get(t, "http://"+addr+"/"); code != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", code)
	}
	if ended.Load() == 0 {
		// The backend's request is cancelled with the client's answer;
		// its handler may see it a moment later.
		deadline := time.Now().Add(5 * time.Second)
		for ended.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if ended.Load() == 0 {
			t.Fatal("the backend's request was not cancelled")
		}
	}
}

// Draining reaches a server a change of timeouts retired: its request in
// flight holds the drain until the drain's deadline, then is cut, and the
// drain returns.
func TestDrainReachesARetiredServer(t *testing.T) {
	arrived := make(chan struct{}, 1)
	held := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(held.Close)
	rules := []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: strings.TrimPrefix(held.URL, "http://"), Weight: 1}}}}
	p, addr := edgeProxy(t, Limits{}, rules...)
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	<-arrived
	if err := p.Apply(&Config{Settings: &Settings{IdleTimeout: 2 * time.Minute},
		Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	p.Drain(ctx)
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("the drain took %v, want about its 300 ms deadline", took)
	}
	select {
	case err := <-answered:
		// Cut: an error, or a 502 the proxy wrote as the backend's
		// request was cancelled; either way, ended.
		_ = err
	case <-time.After(5 * time.Second):
		t.Fatal("the retired server's request was not ended by the drain")
	}
}
