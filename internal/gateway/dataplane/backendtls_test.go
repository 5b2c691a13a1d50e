package dataplane

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// tlsEcho is a backend serving TLS (HTTP/2 or HTTP/1.1 by ALPN) with a
// certificate of ca for backend.example.com and a SPIFFE ID; it answers
// with the server name and protocol it saw, and counts what reaches it.
func tlsEcho(t *testing.T, ca *testcert.CA) (string, *atomic.Int64) {
	t.Helper()
	certPEM, keyPEM := ca.IssueServer(t, []string{"backend.example.com"}, "spiffe://example.com/backend")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("X-Seen-SNI", r.TLS.ServerName)
		w.Header().Set("X-Seen-Proto", r.Proto)
		w.Header().Set("X-Seen-Path", r.URL.Path)
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), &seen
}

func TestABackendIsReachedOverTLSOnlyWhenItsCertificateIsTheOneAskedFor(t *testing.T) {
	ca, other := testcert.NewCA(t, "backends"), testcert.NewCA(t, "other")
	backend, seen := tlsEcho(t, ca)
	plain := echo(t, "plain")
	san := func(host string) gwv1.SubjectAltName {
		return gwv1.SubjectAltName{Type: gwv1.HostnameSubjectAltNameType, Hostname: gwv1.Hostname(host)}
	}
	uri := func(u string) gwv1.SubjectAltName {
		return gwv1.SubjectAltName{Type: gwv1.URISubjectAltNameType, URI: gwv1.AbsoluteURI(u)}
	}
	rule := func(path string, b Backend) Rule {
		b.Weight = 1
		return Rule{Match: gwv1.HTTPRouteMatch{Path: prefix(path)}, Backends: []Backend{b}}
	}
	withTLS := func(t BackendTLS) Backend { return Backend{Address: backend, TLS: &t} }
	cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		rule("/ok", withTLS(BackendTLS{CAPEM: ca.PEM, Hostname: "backend.example.com"})),
		rule("/wrong-ca", withTLS(BackendTLS{CAPEM: other.PEM, Hostname: "backend.example.com"})),
		rule("/wrong-host", withTLS(BackendTLS{CAPEM: ca.PEM, Hostname: "other.example.com"})),
		rule("/san-dns", withTLS(BackendTLS{CAPEM: ca.PEM, Hostname: "sni.example.com", SubjectAltNames: []gwv1.SubjectAltName{san("nope.example.com"), san("backend.example.com")}})),
		rule("/san-uri", withTLS(BackendTLS{CAPEM: ca.PEM, Hostname: "sni.example.com", SubjectAltNames: []gwv1.SubjectAltName{uri("spiffe://example.com/backend")}})),
		rule("/san-mismatch", withTLS(BackendTLS{CAPEM: ca.PEM, Hostname: "backend.example.com", SubjectAltNames: []gwv1.SubjectAltName{san("nope.example.com"), uri("spiffe://example.com/other")}})),
		rule("/system", withTLS(BackendTLS{WellKnownSystem: true, Hostname: "backend.example.com"})),
		rule("/plain", Backend{Address: plain}),
	}}}}}}
	if err := Check(cfg); err != nil {
		t.Fatal(err)
	}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := l.at(t, "tcp/80")
	for _, tc := range []struct {
		path, sni string
		code      int
	}{
		{path: "/ok", sni: "backend.example.com", code: 200},
		{path: "/wrong-ca", code: 503},
		{path: "/wrong-host", code: 503},
		{path: "/san-dns", sni: "sni.example.com", code: 200},
		{path: "/san-uri", sni: "sni.example.com", code: 200},
		{path: "/san-mismatch", code: 503},
		// The test's CA is not among the system's.
		{path: "/system", code: 503},
	} {
		t.Run(tc.path, func(t *testing.T) {
			before := seen.Load()
			resp, err := http.Get("http://" + addr + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code != 200 {
				if n := seen.Load() - before; n != 0 {
					t.Errorf("%d requests reached the backend, want none", n)
				}
				return
			}
			if got := resp.Header.Get("X-Seen-SNI"); got != tc.sni {
				t.Errorf("backend saw server name %q, want %q", got, tc.sni)
			}
			if got := resp.Header.Get("X-Seen-Proto"); got != "HTTP/2.0" {
				t.Errorf("backend spoke %s, want HTTP/2.0 (ALPN h2)", got)
			}
			if got := resp.Header.Get("X-Seen-Path"); got != tc.path {
				t.Errorf("backend saw path %q, want %q", got, tc.path)
			}
		})
	}
	t.Run("without a policy a backend is plain HTTP", func(t *testing.T) {
		resp, err := http.Get("http://" + addr + "/plain")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "plain" {
			t.Errorf("status %d from %q, want 200 from plain", resp.StatusCode, resp.Header.Get("X-Backend"))
		}
	})
}

func TestABackendTLSTheDataPlaneCannotUseIsRefused(t *testing.T) {
	ca := testcert.NewCA(t, "backends")
	for name, bt := range map[string]BackendTLS{
		"no hostname":                     {CAPEM: ca.PEM},
		"no certificate authority":        {Hostname: "a.example.com"},
		"a bundle that does not parse":    {CAPEM: []byte("not PEM"), Hostname: "a.example.com"},
		"both a bundle and the system's":  {CAPEM: ca.PEM, WellKnownSystem: true, Hostname: "a.example.com"},
		"a subjectAltName of no type":     {CAPEM: ca.PEM, Hostname: "a.example.com", SubjectAltNames: []gwv1.SubjectAltName{{Hostname: "a.example.com"}}},
		"a Hostname subjectAltName empty": {CAPEM: ca.PEM, Hostname: "a.example.com", SubjectAltNames: []gwv1.SubjectAltName{{Type: gwv1.HostnameSubjectAltNameType}}},
	} {
		cfg := &Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
			Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: "127.0.0.1:1", Weight: 1, TLS: &bt}},
		}}}}}}}
		if err := Check(cfg); err == nil {
			t.Errorf("%s: Check accepted it", name)
		}
		if err := CheckBackendTLS(&bt); err == nil {
			t.Errorf("%s: CheckBackendTLS accepted it", name)
		}
	}
}
