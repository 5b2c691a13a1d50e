package dataplane

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// loopback opens every port on 127.0.0.1 at a free port and remembers
// where, so a test asks for "port 80" and reaches it.
type loopback struct {
	mu   sync.Mutex
	addr map[string]string
}

func (l *loopback) options() Options {
	l.addr = map[string]string{}
	return Options{
		ListenTCP: func(port int32) (net.Listener, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				l.set(fmt.Sprint("tcp/", port), ln.Addr().String())
			}
			return ln, err
		},
		ListenUDP: func(port int32) (net.PacketConn, error) {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err == nil {
				l.set(fmt.Sprint("udp/", port), pc.LocalAddr().String())
			}
			return pc, err
		},
	}
}

func (l *loopback) set(k, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addr[k] = v
}

func (l *loopback) at(t testing.TB, k string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.addr[k]
	if !ok {
		t.Fatalf("nothing listens on %s", k)
	}
	return a
}

// echo is a backend answering with its name and what it received.
func echo(t *testing.T, name string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Path", r.URL.RequestURI())
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Foo", r.Header.Get("Foo"))
		w.Header().Set("X-Remove-Me", "yes")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// tcpEcho is a TCP backend that sends back what it receives.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// udpEcho is a UDP backend that answers each datagram with reply's prefix
// and the datagram.
func udpEcho(t *testing.T, reply string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(reply), buf[:n]...), from)
		}
	}()
	return pc.LocalAddr().String()
}

func prefix(v string) *gwv1.HTTPPathMatch {
	return &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(v)}
}

func exact(v string) *gwv1.HTTPPathMatch {
	return &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchExact), Value: ptr.To(v)}
}

func TestHTTPRouting(t *testing.T) {
	a, b, c := echo(t, "a"), echo(t, "b"), echo(t, "c")
	one := func(addr string) []Backend { return []Backend{{Address: addr, Weight: 1}} }
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{
		{Hostname: "exact.example.com", Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: one(c)}}},
		{Hostname: "*.example.com", Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: one(b)}}},
		{Rules: []Rule{
			{Match: gwv1.HTTPRouteMatch{Path: exact("/exact")}, Backends: one(b)},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/v2"), Headers: []gwv1.HTTPHeaderMatch{{Name: "version", Value: "two"}}}, Backends: one(c)},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/q"), QueryParams: []gwv1.HTTPQueryParamMatch{{Name: "animal", Value: "whale"}}}, Backends: one(c)},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/m"), Method: ptr.To(gwv1.HTTPMethodPost)}, Backends: one(c)},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/redirect")}, Filters: []gwv1.HTTPRouteFilter{{
				Type: gwv1.HTTPRouteFilterRequestRedirect,
				RequestRedirect: &gwv1.HTTPRequestRedirectFilter{Scheme: ptr.To("https"), Hostname: ptr.To(gwv1.PreciseHostname("other.example.com")),
					Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr.To("/moved")}, StatusCode: ptr.To(301)},
			}}},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/rewrite/")}, Backends: one(a), Filters: []gwv1.HTTPRouteFilter{
				{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{
					Hostname: ptr.To(gwv1.PreciseHostname("rewritten.example.com")),
					Path:     &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr.To("/")}}},
				{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "Foo", Value: "set"}}}},
				{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Remove: []string{"X-Remove-Me"}}},
			}},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/invalid")}, Backends: []Backend{{Weight: 1, Invalid: true}}},
			{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: one(a)},
		}},
	}}}}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for _, tc := range []struct {
		name, method, host, path string
		header                   map[string]string
		code                     int
		backend                  string
		want                     map[string]string
	}{
		{name: "catch-all", host: "any", path: "/", code: 200, backend: "a"},
		{name: "exact path", host: "any", path: "/exact", code: 200, backend: "b"},
		{name: "exact path is not a prefix", host: "any", path: "/exact/more", code: 200, backend: "a"},
		{name: "prefix by element", host: "any", path: "/v2x", header: map[string]string{"version": "two"}, code: 200, backend: "a"},
		{name: "header match", host: "any", path: "/v2/x", header: map[string]string{"version": "two"}, code: 200, backend: "c"},
		{name: "header mismatch", host: "any", path: "/v2/x", header: map[string]string{"version": "one"}, code: 200, backend: "a"},
		{name: "query match", host: "any", path: "/q?animal=whale", code: 200, backend: "c"},
		{name: "method match", method: http.MethodPost, host: "any", path: "/m", code: 200, backend: "c"},
		{name: "method mismatch", host: "any", path: "/m", code: 200, backend: "a"},
		{name: "exact host", host: "exact.example.com", path: "/", code: 200, backend: "c"},
		{name: "wildcard host", host: "x.example.com:80", path: "/", code: 200, backend: "b"},
		{name: "wildcard needs a label", host: "example.com", path: "/", code: 200, backend: "a"},
		{name: "redirect", host: "any", path: "/redirect/page?x=1", code: 301,
			want: map[string]string{"Location": "https://other.example.com/moved/page?x=1"}},
		{name: "rewrite and headers", host: "any", path: "/rewrite/page", header: map[string]string{"Foo": "original"}, code: 200, backend: "a",
			want: map[string]string{"X-Seen-Path": "/page", "X-Seen-Host": "rewritten.example.com", "X-Seen-Foo": "set", "X-Remove-Me": ""}},
		{name: "invalid backend", host: "any", path: "/invalid", code: 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			req, err := http.NewRequest(method, "http://"+addr+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if got := resp.Header.Get("X-Backend"); got != tc.backend {
				t.Errorf("served by %q, want %q", got, tc.backend)
			}
			for k, v := range tc.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}

	// Reprogrammed in place: the same port now sends everything to c.
	cfg.Ports[0].Hosts = []VirtualHost{{Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: one(c)}}}}
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got := l.at(t, "tcp/80"); got != addr {
		t.Fatalf("port reopened at %s, was %s", got, addr)
	}
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Backend"); got != "c" {
		t.Errorf("after Apply served by %q, want c", got)
	}
}

func TestWeights(t *testing.T) {
	a, b := echo(t, "a"), echo(t, "b")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: a, Weight: 3}, {Address: b, Weight: 1}, {Address: "127.0.0.1:1", Weight: 0}},
	}}}}}}}); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	seen := map[string]int{}
	for range 400 {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen[resp.Header.Get("X-Backend")]++
	}
	// 3:1 over 400 requests: a's share is 300 on average; 200..380 fails
	// with a probability far below one in a million.
	if seen["a"] < 200 || seen["a"] > 380 || seen["a"]+seen["b"] != 400 {
		t.Errorf("shares %v, want about 300 a and 100 b, none to the weight-0 backend", seen)
	}
}

func TestHTTPS(t *testing.T) {
	a := echo(t, "a")
	certPEM, keyPEM := testcert.SelfSigned(t, "example.com")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS,
		Certificates: []Certificate{{Hostname: "example.com", CertPEM: certPEM, KeyPEM: keyPEM}},
		Hosts:        []VirtualHost{{Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: a, Weight: 1}}}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "example.com"}}} //nolint:gosec // the test's own certificate
	resp, err := client.Get("https://" + l.at(t, "tcp/443") + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Backend") != "a" || resp.TLS == nil {
		t.Errorf("HTTPS not served by a over TLS: %v", resp.Header)
	}
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS, Certificates: []Certificate{{CertPEM: []byte("junk"), KeyPEM: keyPEM}}}}}); err == nil {
		t.Error("a malformed certificate was applied")
	}
}

func TestTCPAndUDP(t *testing.T) {
	tcpBackend, udpBackend := tcpEcho(t), udpEcho(t, "udp:")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{
		{Port: 5000, Protocol: TCP, Backends: []Backend{{Address: tcpBackend, Weight: 1}}},
		{Port: 5000, Protocol: UDP, Backends: []Backend{{Address: udpBackend, Weight: 1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", l.at(t, "tcp/5000"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := io.ReadFull(c, buf[:4]); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("TCP echo %q, %v", buf[:n], err)
	}
	u, err := net.Dial("udp", l.at(t, "udp/5000"))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := u.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	n, err := u.Read(buf)
	if err != nil || string(buf[:n]) != "udp:ping" {
		t.Fatalf("UDP answer %q, %v", buf[:n], err)
	}

	// The port's protocols removed: both close.
	if err := p.Apply(&Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", l.at(t, "tcp/5000"), time.Second); err == nil {
		t.Error("a removed TCP port still accepts")
	}
}
