package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// edgeProxy serves one HTTP port on loopback to backend with limits, and
// returns the port's address.
func edgeProxy(t *testing.T, lim Limits, rules ...Rule) (*Proxy, string) {
	t.Helper()
	var l loopback
	o := l.options()
	o.Limits = lim
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}}}}); err != nil {
		t.Fatal(err)
	}
	return p, l.at(t, "tcp/80")
}

// hanging is a backend that never answers: it holds each request until the
// proxy gives up on it, counting those it saw end.
func hanging(t *testing.T) (string, *atomic.Int64) {
	var ended atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		ended.Add(1)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), &ended
}

func get(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// An HTTPRoute rule's request timeout is honoured: a backend that never
// answers costs the client the timeout and a 504, and the backend's request
// is cancelled.
func TestRouteRequestTimeoutAnswers504(t *testing.T) {
	backend, ended := hanging(t)
	_, addr := edgeProxy(t, Limits{}, Rule{
		Match:    gwv1.HTTPRouteMatch{Path: prefix("/")},
		Backends: []Backend{{Address: backend, Weight: 1}},
		Timeouts: &gwv1.HTTPRouteTimeouts{Request: ptr.To(gwv1.Duration("200ms"))},
	})
	if code := get(t, "http://"+addr+"/slow"); code != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", code)
	}
	poll.Until(t, 20*time.Second, "the backend's request cancelled", func() bool { return ended.Load() == 1 })
}

// Without any route timeout a backend that never answers still does not
// hold its request forever: the stream idle timeout ends it.
func TestStreamIdleTimeoutEndsAHangingBackendsRequest(t *testing.T) {
	backend, _ := hanging(t)
	_, addr := edgeProxy(t, Limits{StreamIdleTimeout: 200 * time.Millisecond}, Rule{
		Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	})
	if code := get(t, "http://"+addr+"/"); code != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", code)
	}
}

// Oversized headers are refused (431) before any backend sees them, and a
// request smuggled inside another (both Content-Length and
// Transfer-Encoding: the proxy frames by Transfer-Encoding alone, as RFC
// 9112 says; two Content-Lengths: refused) never reaches a backend its
// rules do not send it to: the proxy re-frames every request it forwards.
func TestHostileRequestsAreRefusedAtTheEdge(t *testing.T) {
	var seen atomic.Int64
	var smuggled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if r.URL.Path != "/" {
			smuggled.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	_, addr := edgeProxy(t, Limits{}, Rule{
		Match: gwv1.HTTPRouteMatch{Path: exact("/")}, Backends: []Backend{{Address: strings.TrimPrefix(srv.URL, "http://"), Weight: 1}},
	})
	raw := func(req string) []int {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		go func() { _, _ = io.WriteString(c, req) }()
		var codes []int
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return codes
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
			if resp.Close {
				return codes
			}
		}
	}
	big := strings.Repeat("x", 70<<10)
	for _, tc := range []struct {
		name, req string
		codes     []int
	}{
		{name: "header flood", req: "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + big + "\r\n\r\n", codes: []int{http.StatusRequestHeaderFieldsTooLarge}},
		{name: "CL and TE", req: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
			codes: []int{http.StatusOK, http.StatusNotFound}},
		{name: "two Content-Lengths", req: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 44\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", codes: []int{http.StatusBadRequest}},
		{name: "well-formed", req: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", codes: []int{http.StatusOK}},
	} {
		if codes := raw(tc.req); fmt.Sprint(codes) != fmt.Sprint(tc.codes) {
			t.Errorf("%s: statuses %v, want %v", tc.name, codes, tc.codes)
		}
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the backend saw %d requests, want the 2 routed ones", n)
	}
	if n := smuggled.Load(); n != 0 {
		t.Errorf("the backend saw %d smuggled requests", n)
	}
}

// A slowloris client, which opens connections and sends its headers a byte
// at a time, loses its connections after the header timeout; a client
// behaving well is served meanwhile.
func TestSlowHeadersCostOnlyTheirConnection(t *testing.T) {
	backend := echo(t, "a")
	_, addr := edgeProxy(t, Limits{RequestHeaderTimeout: 300 * time.Millisecond}, Rule{
		Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	})
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "GET / HTTP/1.1\r\nHost: a\r\nX-Slow: 1")
	if code := get(t, "http://"+addr+"/"); code != http.StatusOK {
		t.Fatalf("a good client got %d", code)
	}
	_ = slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.ReadAll(slow)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the slow connection was still open after 20 s")
	}
}

// A flood of connections that send nothing cannot lock clients out: at the
// connection limit the longest-waiting idle connection makes room, so a
// client behaving well is served and the data plane holds no more than its
// limit.
func TestConnectionFloodEvictsTheIdleNotTheNextClient(t *testing.T) {
	backend := echo(t, "a")
	p, addr := edgeProxy(t, Limits{MaxConnections: 20}, Rule{
		Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: backend, Weight: 1}},
	})
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range 100 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// The proxy accepts in its own time: wait until it has seen them all.
	poll.Until(t, 20*time.Second, "80 idle connections evicted", func() bool { return p.conns.evicted.Load() >= 80 })
	if n := p.conns.count(); n > 20 {
		t.Fatalf("%d connections held, limit 20", n)
	}
	for range 5 {
		if code := get(t, "http://"+addr+"/"); code != http.StatusOK {
			t.Fatalf("a good client got %d", code)
		}
	}
}

// A TCP route's connection that carries nothing either way is closed after
// the TCP idle timeout; one carrying data one way only is not.
func TestTCPIdleTimeout(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			// Streams a byte every 50 ms, reading nothing: one-way traffic.
			go func() {
				defer c.Close()
				for range 20 {
					if _, err := c.Write([]byte{'x'}); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				<-make(chan struct{}) // then silent until closed
			}()
		}
	}()
	var l loopback
	o := l.options()
	o.Limits.TCPIdleTimeout = 300 * time.Millisecond
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 5000, Protocol: TCP, Backends: []Backend{{Address: backend.Addr().String(), Weight: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.at(t, "tcp/5000"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the idle TCP connection was still open after 20 s")
	}
	// One-way traffic for about a second (longer than the idle timeout)
	// kept the connection; the silence after it closed it.
	if len(got) != 20 {
		t.Fatalf("got %d bytes before the close, want all 20", len(got))
	}
}

// A flood of UDP client addresses holds at most MaxUDPFlows flows, and a
// client behaving well is answered during it.
func TestUDPSourceFloodIsCapped(t *testing.T) {
	backend := udpEcho(t, "")
	var l loopback
	o := l.options()
	o.Limits.MaxUDPFlows = 8
	p := New(o)
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 53, Protocol: UDP, Backends: []Backend{{Address: backend, Weight: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "udp/53")
	var relay *udpRelay
	p.mu.Lock()
	for _, s := range p.ports {
		relay = s.relay
	}
	p.mu.Unlock()
	flows := func() int {
		relay.mu.Lock()
		defer relay.mu.Unlock()
		return len(relay.flows)
	}
	ask := func(c net.Conn, msg string) bool {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return false
		}
		buf := make([]byte, 64)
		n, err := c.Read(buf)
		return err == nil && string(buf[:n]) == msg
	}
	for i := range 100 {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "flood %d", i)
		c.Close()
		if n := flows(); n > 8 {
			t.Fatalf("%d flows, limit 8", n)
		}
	}
	good, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if !ask(good, "hello") {
		t.Fatal("a good client was not answered during the flood")
	}
}
