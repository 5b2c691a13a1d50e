package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// An HTTPS port with client validation serves only clients whose
// certificate chains to its authorities (AllowValidOnly); with the
// insecure fallback it serves every client; a change of programming
// applies to the next handshake.
func TestClientCertificatesAreChecked(t *testing.T) {
	a := echo(t, "a")
	serverCert, serverKey := testcert.SelfSigned(t, "a.example")
	trusted, other := testcert.NewCA(t, "trusted"), testcert.NewCA(t, "other")
	goodCert, goodKey := trusted.Issue(t, pkix.Name{CommonName: "good"}, x509.ExtKeyUsageClientAuth)
	badCert, badKey := other.Issue(t, pkix.Name{CommonName: "bad"}, x509.ExtKeyUsageClientAuth)
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	apply := func(cv *ClientValidation) {
		t.Helper()
		if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS,
			Certificates:     []Certificate{{Hostname: "a.example", CertPEM: serverCert, KeyPEM: serverKey}},
			Hosts:            []VirtualHost{{Hostname: "a.example", Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: a, Weight: 1}}}}}},
			ClientValidation: cv,
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	served := func(certPEM, keyPEM []byte) bool {
		t.Helper()
		cfg := &tls.Config{InsecureSkipVerify: true, ServerName: "a.example"} //nolint:gosec // the test's own certificate
		if certPEM != nil {
			c, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		req, _ := http.NewRequest(http.MethodGet, "https://"+l.at(t, "tcp/443")+"/", nil)
		req.Host = "a.example"
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	apply(&ClientValidation{CAPEM: trusted.PEM})
	if !served(goodCert, goodKey) {
		t.Error("a client with a certificate of the trusted authority was not served")
	}
	if served(badCert, badKey) {
		t.Error("a client with another authority's certificate was served")
	}
	if served(nil, nil) {
		t.Error("a client without a certificate was served")
	}
	apply(&ClientValidation{CAPEM: trusted.PEM, InsecureFallback: true})
	for name, c := range map[string][2][]byte{"trusted": {goodCert, goodKey}, "other": {badCert, badKey}, "none": {nil, nil}} {
		if !served(c[0], c[1]) {
			t.Errorf("insecure fallback: the client with %s certificate was not served", name)
		}
	}
	apply(nil)
	if !served(nil, nil) {
		t.Error("without validation a client without a certificate was not served")
	}
	if err := Check(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS,
		Certificates:     []Certificate{{CertPEM: serverCert, KeyPEM: serverKey}},
		ClientValidation: &ClientValidation{CAPEM: []byte("not PEM")},
	}}}); err == nil {
		t.Error("a client validation without an authority was accepted")
	}
}
