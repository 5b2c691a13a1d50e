package dataplane

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A stream that started under a route ends when the route is removed (or
// its backend is no longer allowed), once the grace is over: removal
// revokes access, also for what is already flowing. A stream of a route
// that stays is untouched.
func TestRemovingARouteEndsItsStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	backend := strings.TrimPrefix(srv.URL, "http://")
	rule := func(route, path string) Rule {
		return Rule{Route: route, Match: gwv1.HTTPRouteMatch{Path: prefix(path)}, Backends: []Backend{{Address: backend, Weight: 1}}}
	}
	cfg := func(rules ...Rule) *Config {
		return &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}}}}
	}
	var l loopback
	// A short grace: the stream outlives it.
	o := l.options()
	o.RevokeGrace = 100 * time.Millisecond
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(cfg(rule("ns/kept", "/kept"), rule("ns/removed", "/removed"))); err != nil {
		t.Fatal(err)
	}
	open := func(path string) *bufio.Reader {
		resp, err := http.Get("http://" + l.at(t, "tcp/80") + path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "tick\n" {
			t.Fatalf("%s: first line %q, %v", path, line, err)
		}
		return br
	}
	kept, removed := open("/kept"), open("/removed")
	if err := p.Apply(cfg(rule("ns/kept", "/kept"))); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		// The stream ends, with an error or without: either way it
		// no longer flows.
		_, _ = io.Copy(io.Discard, removed)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the removed route's stream still flows 20 s after the change")
	}
	for range 3 {
		if line, err := kept.ReadString('\n'); err != nil || line != "tick\n" {
			t.Fatalf("the kept route's stream ended: %q, %v", line, err)
		}
	}
}

// A TCP connection to a backend that a change removes is closed.
func TestRemovingATCPBackendClosesItsConnections(t *testing.T) {
	a, b := tcpEcho(t), tcpEcho(t)
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	port := func(addr string) *Config {
		return &Config{Ports: []Port{{Port: 5000, Protocol: TCP, Backends: []Backend{{Address: addr, Weight: 1}}}}}
	}
	if err := p.Apply(port(a)); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.at(t, "tcp/5000"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(port(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the connection to the removed backend is still open after 20 s")
		}
	}
}

// A request in flight when its route moves to another backend finishes
// with the backend it reached: a route changed under load costs no
// request (it would be ended only by outliving the grace).
func TestMovingARouteFinishesItsRequests(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(reached)
		<-release
		_, _ = io.WriteString(w, "old")
	}))
	t.Cleanup(old.Close)
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "next") }))
	t.Cleanup(next.Close)
	cfg := func(backend string) *Config {
		return &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
			Route: "ns/moved", Match: gwv1.HTTPRouteMatch{Path: prefix("/")},
			Backends: []Backend{{Address: strings.TrimPrefix(backend, "http://"), Weight: 1}},
		}}}}}}}
	}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg(old.URL)); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/")
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, string(b), err}
	}()
	<-reached
	if err := p.Apply(cfg(next.URL)); err != nil {
		t.Fatal(err)
	}
	// The new programming is in place: a new request reaches the new
	// backend, while the first is still held by the old one.
	resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "next" {
		t.Fatalf("a request after the change reached %q, want the new backend", b)
	}
	close(release)
	if a := <-got; a.err != nil || a.code != http.StatusOK || a.body != "old" {
		t.Errorf("the request in flight during the change: %d %q %v, want 200 from the backend it reached", a.code, a.body, a.err)
	}
}
