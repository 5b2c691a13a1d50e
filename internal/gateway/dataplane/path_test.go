package dataplane

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A path is matched and forwarded in its normalized form (Envoy Gateway's
// defaults): dot segments removed, slashes merged, unreserved escapes
// decoded, escaped slashes redirected.
func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct {
		in, escaped, decoded string
		redirect             bool
	}{
		{in: "/", escaped: "/", decoded: "/"},
		{in: "/public/x", escaped: "/public/x", decoded: "/public/x"},
		{in: "/public/../admin", escaped: "/admin", decoded: "/admin"},
		{in: "/public/%2e%2e/admin", escaped: "/admin", decoded: "/admin"},
		{in: "/public/%2E%2e/admin", escaped: "/admin", decoded: "/admin"},
		{in: "/public/.%2e/admin", escaped: "/admin", decoded: "/admin"},
		{in: "/../../etc/passwd", escaped: "/etc/passwd", decoded: "/etc/passwd"},
		{in: "/a/./b/.", escaped: "/a/b/", decoded: "/a/b/"},
		{in: "/a/b/..", escaped: "/a/", decoded: "/a/"},
		{in: "//a///b//", escaped: "/a/b/", decoded: "/a/b/"},
		{in: `/a\b`, escaped: "/a/b", decoded: "/a/b"},
		{in: "/%7Euser/%61", escaped: "/~user/a", decoded: "/~user/a"},
		{in: "/a%3fb/%2b", escaped: "/a%3Fb/%2B", decoded: "/a?b/+"},
		{in: "/a%20b", escaped: "/a%20b", decoded: "/a b"},
		{in: "/public%2F..%2Fadmin", escaped: "/admin", decoded: "/admin", redirect: true},
		{in: "/public%2fx", escaped: "/public/x", decoded: "/public/x", redirect: true},
		{in: "/public%5Cx", escaped: "/public/x", decoded: "/public/x", redirect: true},
		{in: "/a%252e%252e", escaped: "/a%252e%252e", decoded: "/a%2e%2e"},
	} {
		got, ok := normalizePath(tc.in)
		if !ok {
			t.Errorf("%q refused", tc.in)
			continue
		}
		if got.escaped != tc.escaped || got.decoded != tc.decoded || got.redirect != tc.redirect {
			t.Errorf("%q: got %+v, want escaped %q decoded %q redirect %v", tc.in, got, tc.escaped, tc.decoded, tc.redirect)
		}
	}
	for _, bad := range []string{"", "a/b", "*"} {
		if _, ok := normalizePath(bad); ok {
			t.Errorf("%q accepted, want refused", bad)
		}
	}
}

// FuzzNormalizePath: normalization never panics, is idempotent, leaves no
// dot segment or empty segment behind, and never yields a path with more
// segments of a prefix than the raw form's segments allowed: what it
// matches is a path the raw form resolves to.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/../b", "/%2e%2e/%2F", `/a\..\b`, "//x//y/", "/a%zz", "/%", "/.%2E/", "/a/b/", "/a/./b", "/a/.", "/a/..", "/.a/..b/", "/a//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, ok := normalizePath(in)
		if !ok {
			if strings.HasPrefix(in, "/") {
				t.Fatalf("%q refused", in)
			}
			return
		}
		// The shortcut for paths normal already takes only paths the
		// full walk leaves as they are.
		if slow := normalizeSlow(in); slow != n {
			t.Fatalf("%q: normalized to %+v, the full walk to %+v", in, n, slow)
		}
		again, ok := normalizePath(n.escaped)
		if !ok || again.escaped != n.escaped || again.redirect {
			t.Fatalf("%q: normalized %q normalizes again to %+v", in, n.escaped, again)
		}
		if !strings.HasPrefix(n.escaped, "/") {
			t.Fatalf("%q: %q is not absolute", in, n.escaped)
		}
		for i, s := range strings.Split(strings.TrimSuffix(n.escaped[1:], "/"), "/") {
			if s == "." || s == ".." || (s == "" && n.escaped != "/") {
				t.Fatalf("%q: segment %d of %q is %q", in, i, n.escaped, s)
			}
		}
	})
}

// rawGet sends a request line exactly as written (curl --path-as-is) and
// returns the status and the backend that served it.
func rawGet(t *testing.T, addr, target string) (int, string, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: any\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Backend") + resp.Header.Get("Location"), resp.Header.Get("X-Seen-Path")
}

// A client cannot reach a route's backend through a path its match does
// not take: /public/../admin is /admin, for the rules and for the backend.
func TestPathTraversalCannotEscapeAPrefix(t *testing.T) {
	pub, admin := echo(t, "public"), echo(t, "admin")
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Match: gwv1.HTTPRouteMatch{Path: exact("/admin")}, Backends: []Backend{{Address: admin, Weight: 1}}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/public")}, Backends: []Backend{{Address: pub, Weight: 1}}},
	}}}}}}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	for _, tc := range []struct {
		target       string
		code         int
		served, seen string
	}{
		{target: "/public/x", code: 200, served: "public", seen: "/public/x"},
		{target: "/public/../admin", code: 200, served: "admin", seen: "/admin"},
		{target: "/public/%2e%2e/admin", code: 200, served: "admin", seen: "/admin"},
		{target: "/public/%2e%2e/secret", code: 404},
		{target: "/public/..%2fadmin", code: 307, served: "/admin"},
		{target: "/public//x", code: 200, served: "public", seen: "/public/x"},
		{target: "/public/a%3Fb", code: 200, served: "public", seen: "/public/a%3Fb"},
	} {
		code, served, seen := rawGet(t, addr, tc.target)
		if code != tc.code || served != tc.served || seen != tc.seen {
			t.Errorf("%s: %d from %q seeing %q, want %d from %q seeing %q", tc.target, code, served, seen, tc.code, tc.served, tc.seen)
		}
	}
}

// FuzzRouter: any request line and host reach the router without a panic,
// and a request is served by a rule only if its normalized path matches the
// rule: /public's backend never answers a path outside /public.
func FuzzRouter(f *testing.F) {
	for _, s := range []string{"/public/x", "/public/../admin", "/public%2F..%2Fadmin", "//public", "/public/%2e%2e/", "/p\\..\\admin"} {
		f.Add(s, "any")
	}
	r, err := compileHTTP(Port{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{
		{Hostname: "*.example.com", Rules: []Rule{{Route: "wild", Match: gwv1.HTTPRouteMatch{Path: prefix("/")}}}},
		{Rules: []Rule{{Route: "public", Match: gwv1.HTTPRouteMatch{Path: prefix("/public")}}}},
	}}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, host string) {
		req, err := http.NewRequest(http.MethodGet, "http://x/", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.Path, req.URL.RawPath, req.Host = path, "", host
		if u, err := req.URL.Parse(path); err == nil && u.Host == "" && u.Scheme == "" {
			req.URL = u
		}
		w := httptest.NewRecorder()
		r.serveOn(w, req, nil)
		if w.Code == http.StatusInternalServerError {
			// No backends: the rule that took it answered. Only a
			// normalized path under /public may be taken by "public".
			n, ok := normalizePath(req.URL.EscapedPath())
			if ok && !n.redirect && r.host(host) != nil && r.host(host).name == "" && !prefixMatch(n.decoded, "/public") {
				t.Fatalf("%q taken by /public (normalized %q)", path, n.decoded)
			}
		}
	})
}
