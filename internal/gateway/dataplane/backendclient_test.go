package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// mtlsEcho is a TLS backend for backend.example.com (a certificate of
// serverCA) that serves only a client whose certificate clientCA issued,
// answering with the client certificate's common name; it counts what
// reaches it.
func mtlsEcho(t *testing.T, serverCA, clientCA *testcert.CA) (string, *atomic.Int64) {
	t.Helper()
	certPEM, keyPEM := serverCA.IssueServer(t, []string{"backend.example.com"})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(clientCA.PEM) {
		t.Fatal("client CA does not parse")
	}
	var seen atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		w.Header().Set("X-Seen-Client", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.EnableHTTP2 = true
	// The handshakes refused are the test's point, not news.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), &seen
}

// TestABackendAskingForAClientCertificateIsPresentedTheGateways: the
// Gateway's backend client certificate (spec.tls.backend) is what a
// backend requiring one sees; without it, or with one the backend does
// not trust, nothing reaches the backend (503). A renewed certificate is
// presented from the next programming on.
func TestABackendAskingForAClientCertificateIsPresentedTheGateways(t *testing.T) {
	serverCA, clientCA, other := testcert.NewCA(t, "backends"), testcert.NewCA(t, "gateway clients"), testcert.NewCA(t, "other")
	backend, seen := mtlsEcho(t, serverCA, clientCA)
	client := func(ca *testcert.CA, name string) *Certificate {
		certPEM, keyPEM := ca.Issue(t, pkix.Name{CommonName: name}, x509.ExtKeyUsageClientAuth)
		return &Certificate{CertPEM: certPEM, KeyPEM: keyPEM}
	}
	config := func(c *Certificate) *Config {
		return &Config{BackendClientCertificate: c, Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
			Match:    gwv1.HTTPRouteMatch{Path: prefix("/")},
			Backends: []Backend{{Address: backend, Weight: 1, TLS: &BackendTLS{CAPEM: serverCA.PEM, Hostname: "backend.example.com"}}},
		}}}}}}}
	}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	for _, tc := range []struct {
		name   string
		cert   *Certificate
		code   int
		client string
	}{
		{name: "no client certificate", code: 503},
		{name: "one the backend does not trust", cert: client(other, "stranger"), code: 503},
		{name: "the Gateway's", cert: client(clientCA, "gateway-a"), code: 200, client: "gateway-a"},
		{name: "the Gateway's renewed", cert: client(clientCA, "gateway-b"), code: 200, client: "gateway-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(tc.cert)
			if err := Check(cfg); err != nil {
				t.Fatal(err)
			}
			if err := p.Apply(cfg); err != nil {
				t.Fatal(err)
			}
			before := seen.Load()
			resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/")
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
			if got := resp.Header.Get("X-Seen-Client"); got != tc.client {
				t.Errorf("backend saw client certificate %q, want %q", got, tc.client)
			}
		})
	}
}

func TestABackendClientCertificateThatDoesNotParseIsRefused(t *testing.T) {
	ca := testcert.NewCA(t, "clients")
	certPEM, _ := ca.Issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageClientAuth)
	_, otherKey := ca.Issue(t, pkix.Name{CommonName: "other"}, x509.ExtKeyUsageClientAuth)
	for name, c := range map[string]*Certificate{
		"no key":        {CertPEM: certPEM},
		"another's key": {CertPEM: certPEM, KeyPEM: otherKey},
		"not PEM":       {CertPEM: []byte("not PEM"), KeyPEM: []byte("not PEM")},
	} {
		if err := Check(&Config{BackendClientCertificate: c}); err == nil {
			t.Errorf("%s: Check accepted it", name)
		}
	}
}
