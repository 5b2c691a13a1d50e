package dataplane

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The conformance suite's filters (httproute-cors.yaml), and more.
var (
	corsOrigins = &gwv1.HTTPCORSFilter{
		AllowOrigins:     []gwv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com", "http://local.example.com:8080"},
		AllowMethods:     []gwv1.HTTPMethodWithWildcard{"GET", "OPTIONS"},
		AllowHeaders:     []gwv1.HTTPHeaderName{"x-header-1", "x-header-2"},
		ExposeHeaders:    []gwv1.HTTPHeaderName{"x-header-3", "x-header-4"},
		AllowCredentials: ptr.To(true),
		MaxAge:           3600,
	}
	corsAnyMethod       = &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"*"}}
	corsAnyOrigin       = &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"*"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"PUT"}, ExposeHeaders: []gwv1.HTTPHeaderName{"*"}}
	corsAnyWithCreds    = &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"*"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"*"}, AllowHeaders: []gwv1.HTTPHeaderName{"*"}, ExposeHeaders: []gwv1.HTTPHeaderName{"*"}, AllowCredentials: ptr.To(true)}
	corsAnyWithoutCreds = &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"*"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"*"}, AllowHeaders: []gwv1.HTTPHeaderName{"*"}, AllowCredentials: ptr.To(false)}
	corsAnyHTTPSHost    = &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://*:8443"}}
)

func corsHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestCORSAnswer(t *testing.T) {
	preflight := func(origin, method, headers string) http.Header {
		h := corsHeader("Origin", origin, "Access-Control-Request-Method", method)
		if headers != "" {
			h.Set("Access-Control-Request-Headers", headers)
		}
		return h
	}
	for _, tc := range []struct {
		name   string
		filter *gwv1.HTTPCORSFilter
		method string
		header http.Header
		want   corsAnswer
	}{
		{"a preflight from an origin named is answered with the configured lists, credentials and max age", corsOrigins,
			http.MethodOptions, preflight("https://www.foo.com", "GET", "x-header-1, x-header-2"),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://www.foo.com", allowCredentials: true,
				allowMethods: "GET, OPTIONS", allowHeaders: "x-header-1, x-header-2", exposeHeaders: "x-header-3, x-header-4", maxAge: "3600"}},
		{"a wildcard origin takes a host of one label more", corsOrigins,
			http.MethodOptions, preflight("https://www.bar.com", "GET", ""),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://www.bar.com", allowCredentials: true,
				allowMethods: "GET, OPTIONS", allowHeaders: "x-header-1, x-header-2", exposeHeaders: "x-header-3, x-header-4", maxAge: "3600"}},
		{"a wildcard origin takes any number of labels to its left", corsOrigins,
			http.MethodGet, corsHeader("Origin", "https://xpto.www.bar.com"),
			corsAnswer{varyOrigin: true, allowOrigin: "https://xpto.www.bar.com", allowCredentials: true, exposeHeaders: "x-header-3, x-header-4"}},
		{"a wildcard origin does not take the bare domain", corsOrigins,
			http.MethodGet, corsHeader("Origin", "https://bar.com"), corsAnswer{varyOrigin: true}},
		{"a wildcard origin does not take a host merely ending alike", corsOrigins,
			http.MethodGet, corsHeader("Origin", "https://foobar.com"), corsAnswer{varyOrigin: true}},
		{"an origin of another scheme is not the one named", corsOrigins,
			http.MethodGet, corsHeader("Origin", "http://www.foo.com"), corsAnswer{varyOrigin: true}},
		{"an origin written with its scheme's own port is the one named without", corsOrigins,
			http.MethodGet, corsHeader("Origin", "https://www.foo.com:443"),
			corsAnswer{varyOrigin: true, allowOrigin: "https://www.foo.com:443", allowCredentials: true, exposeHeaders: "x-header-3, x-header-4"}},
		{"an origin of another port is not the one named", corsOrigins,
			http.MethodGet, corsHeader("Origin", "https://www.foo.com:8443"), corsAnswer{varyOrigin: true}},
		{"an origin named with its port takes that port only", corsOrigins,
			http.MethodGet, corsHeader("Origin", "http://local.example.com:8080"),
			corsAnswer{varyOrigin: true, allowOrigin: "http://local.example.com:8080", allowCredentials: true, exposeHeaders: "x-header-3, x-header-4"}},
		{"hosts compare without case", corsOrigins,
			http.MethodGet, corsHeader("Origin", "HTTPS://WWW.Foo.com"),
			corsAnswer{varyOrigin: true, allowOrigin: "HTTPS://WWW.Foo.com", allowCredentials: true, exposeHeaders: "x-header-3, x-header-4"}},
		{"a preflight from an origin not named gets no CORS header but Vary", corsOrigins,
			http.MethodOptions, preflight("https://foobar.com", "GET", ""), corsAnswer{preflight: true, varyOrigin: true}},
		{"a preflight for a method not allowed gets the allowed ones, which the client holds it to", corsOrigins,
			http.MethodOptions, preflight("https://www.foo.com", "DELETE", "x-other"),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://www.foo.com", allowCredentials: true,
				allowMethods: "GET, OPTIONS", allowHeaders: "x-header-1, x-header-2", exposeHeaders: "x-header-3, x-header-4", maxAge: "3600"}},
		{"an OPTIONS request without Access-Control-Request-Method is no preflight", corsOrigins,
			http.MethodOptions, corsHeader("Origin", "https://www.foo.com"),
			corsAnswer{varyOrigin: true, allowOrigin: "https://www.foo.com", allowCredentials: true, exposeHeaders: "x-header-3, x-header-4"}},
		{"an OPTIONS request without Origin is no preflight", corsOrigins,
			http.MethodOptions, corsHeader("Access-Control-Request-Method", "GET"), corsAnswer{varyOrigin: true}},
		{"a request without Origin gets no CORS header but Vary", corsOrigins,
			http.MethodGet, http.Header{}, corsAnswer{varyOrigin: true}},
		{"an opaque origin is not allowed", corsOrigins,
			http.MethodGet, corsHeader("Origin", "null"), corsAnswer{varyOrigin: true}},
		{"any method without credentials is answered with *, max age its default", corsAnyMethod,
			http.MethodOptions, preflight("https://www.foo.com", "POST", ""),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://www.foo.com", allowMethods: "*", maxAge: "5"}},
		{"any origin without credentials is answered with * for every origin, no Vary", corsAnyOrigin,
			http.MethodOptions, preflight("https://foobar.com:12345", "PUT", ""),
			corsAnswer{preflight: true, allowOrigin: "*", allowMethods: "PUT", exposeHeaders: "*", maxAge: "5"}},
		{"any origin without credentials answers * to a request without Origin too", corsAnyOrigin,
			http.MethodPut, http.Header{}, corsAnswer{allowOrigin: "*", exposeHeaders: "*"}},
		{"any origin, method and header with credentials echo the origin, method and headers asked", corsAnyWithCreds,
			http.MethodOptions, preflight("https://other.foo.com", "PUT", "x-header-1, x-header-2"),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://other.foo.com", allowCredentials: true,
				allowMethods: "PUT", allowHeaders: "x-header-1, x-header-2", maxAge: "5"}},
		{"any header with credentials answers no header list when none is asked", corsAnyWithCreds,
			http.MethodOptions, preflight("https://other.foo.com", "PUT", ""),
			corsAnswer{preflight: true, varyOrigin: true, allowOrigin: "https://other.foo.com", allowCredentials: true, allowMethods: "PUT", maxAge: "5"}},
		{"any header exposed with credentials names the response's headers", corsAnyWithCreds,
			http.MethodGet, corsHeader("Origin", "https://other.foo.com"),
			corsAnswer{varyOrigin: true, allowOrigin: "https://other.foo.com", allowCredentials: true, exposeAll: true}},
		{"any origin with credentials does not echo an opaque origin", corsAnyWithCreds,
			http.MethodGet, corsHeader("Origin", "null"), corsAnswer{varyOrigin: true}},
		{"any origin with credentials does not echo an origin with a path", corsAnyWithCreds,
			http.MethodGet, corsHeader("Origin", "https://other.foo.com/page"), corsAnswer{varyOrigin: true}},
		{"any origin, method and header without credentials are answered with *", corsAnyWithoutCreds,
			http.MethodOptions, preflight("https://other.foo.com", "PUT", "x-header-1, x-header-2"),
			corsAnswer{preflight: true, allowOrigin: "*", allowMethods: "*", allowHeaders: "*", maxAge: "5"}},
		{"any host of a scheme and port takes every host there", corsAnyHTTPSHost,
			http.MethodGet, corsHeader("Origin", "https://anything.example.org:8443"),
			corsAnswer{varyOrigin: true, allowOrigin: "https://anything.example.org:8443"}},
		{"any host of a scheme and port takes no other port", corsAnyHTTPSHost,
			http.MethodGet, corsHeader("Origin", "https://anything.example.org"), corsAnswer{varyOrigin: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compileCORS(tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.answer(tc.method, tc.header); got != tc.want {
				t.Errorf("answer\n got  %+v\n want %+v", got, tc.want)
			}
		})
	}
}

func TestCORSFilterRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		filter *gwv1.HTTPCORSFilter
	}{
		{"a filter without its settings", nil},
		{"an origin of another scheme", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"ftp://www.foo.com"}}},
		{"an origin without a scheme", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"www.foo.com"}}},
		{"an origin with a path", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com/"}}},
		{"an origin of port 0", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com:0"}}},
		{"an origin of a port above 65535", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com:99999"}}},
		{"an origin with an empty port", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.foo.com:"}}},
		{"a wildcard inside a host", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www.*.com"}}},
		{"a wildcard glued to a label", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://*foo.com"}}},
		{"an empty label", &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"https://www..foo.com"}}},
		{"a header name that is no token", &gwv1.HTTPCORSFilter{AllowHeaders: []gwv1.HTTPHeaderName{"x-a\r\nx-b"}}},
		{"an exposed header name that is no token", &gwv1.HTTPCORSFilter{ExposeHeaders: []gwv1.HTTPHeaderName{"x a"}}},
		{"a method that is no token", &gwv1.HTTPCORSFilter{AllowMethods: []gwv1.HTTPMethodWithWildcard{"GET, PUT"}}},
		{"a negative max age", &gwv1.HTTPCORSFilter{MaxAge: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckCORS(tc.filter); err == nil {
				t.Errorf("CheckCORS(%+v) = nil, want an error", tc.filter)
			}
		})
	}
	for _, o := range []gwv1.CORSOrigin{"*", "https://*", "http://*:8080", "https://*.bar.com", "http://198.18.0.1:8080", "http://[::1]:8080", "HTTPS://WWW.FOO.COM"} {
		if err := CheckCORS(&gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{o}}); err != nil {
			t.Errorf("origin %q refused: %v", o, err)
		}
	}
}

// TestCORSServed: a preflight is answered by the gateway without reaching
// the backend; an actual request's response carries the filter's headers
// in place of the backend's own, and so does one the gateway answers (a
// backend refused); a rule without the filter leaves the backend's be.
func TestCORSServed(t *testing.T) {
	var reached atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Access-Control-Allow-Origin", "https://backend.example.com")
		w.Header().Set("X-Custom", "1")
		w.Header().Set("Content-Type", "text/plain")
	}))
	t.Cleanup(backend.Close)
	addr := strings.TrimPrefix(backend.URL, "http://")
	cors := func(f *gwv1.HTTPCORSFilter) []gwv1.HTTPRouteFilter {
		return []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterCORS, CORS: f}}
	}
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/cors")}, Filters: cors(corsOrigins), Backends: []Backend{{Address: addr, Weight: 1}}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/all")}, Filters: cors(corsAnyWithCreds), Backends: []Backend{{Address: addr, Weight: 1}}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/refused")}, Filters: cors(corsOrigins), Backends: []Backend{{Weight: 1, Invalid: true}}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: addr, Weight: 1}}},
	}}}}}}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.at(t, "tcp/80")

	for _, tc := range []struct {
		name, method, path, origin string
		preflight                  bool
		code                       int
		want                       map[string][]string
	}{
		{name: "a preflight is answered by the gateway", method: http.MethodOptions, path: "/cors", origin: "https://www.foo.com", preflight: true, code: http.StatusNoContent,
			want: map[string][]string{"Access-Control-Allow-Origin": {"https://www.foo.com"}, "Access-Control-Allow-Methods": {"GET, OPTIONS"},
				"Access-Control-Max-Age": {"3600"}, "Vary": {"Origin"}}},
		{name: "an actual request gets the filter's origin, not the backend's", method: http.MethodGet, path: "/cors", origin: "https://www.bar.com", code: http.StatusOK,
			want: map[string][]string{"Access-Control-Allow-Origin": {"https://www.bar.com"}, "Access-Control-Allow-Credentials": {"true"},
				"Access-Control-Expose-Headers": {"x-header-3, x-header-4"}, "Vary": {"Origin"}}},
		{name: "an origin not allowed gets no allowed origin, not even the backend's", method: http.MethodGet, path: "/cors", origin: "https://foobar.com", code: http.StatusOK,
			want: map[string][]string{"Access-Control-Allow-Origin": nil, "Vary": {"Origin"}}},
		{name: "every header exposed with credentials names the response's headers", method: http.MethodGet, path: "/all", origin: "https://other.foo.com", code: http.StatusOK,
			want: map[string][]string{"Access-Control-Allow-Origin": {"https://other.foo.com"}, "Access-Control-Expose-Headers": {"Date, X-Custom"}}},
		{name: "a response the gateway makes carries the filter's headers", method: http.MethodGet, path: "/refused", origin: "https://www.foo.com", code: http.StatusInternalServerError,
			want: map[string][]string{"Access-Control-Allow-Origin": {"https://www.foo.com"}}},
		{name: "a rule without the filter leaves the backend's headers be", method: http.MethodOptions, path: "/other", origin: "https://www.foo.com", preflight: true, code: http.StatusOK,
			want: map[string][]string{"Access-Control-Allow-Origin": {"https://backend.example.com"}, "Vary": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Origin", tc.origin)
			if tc.preflight {
				req.Header.Set("Access-Control-Request-Method", "GET")
			}
			before := reached.Load()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.code)
			}
			answeredByGateway := tc.code == http.StatusNoContent || tc.code == http.StatusInternalServerError
			if got := reached.Load() > before; got == answeredByGateway {
				t.Errorf("backend reached: %v, want %v", got, !answeredByGateway)
			}
			for k, v := range tc.want {
				if got := resp.Header.Values(k); strings.Join(got, "|") != strings.Join(v, "|") {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}
