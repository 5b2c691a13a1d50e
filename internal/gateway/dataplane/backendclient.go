package dataplane

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
)

// The Gateway's backend client certificate (spec.tls.backend's
// clientCertificateRef) is presented to every backend the data plane
// reaches over TLS. It is given whenever the backend asks for one: Go's
// default would send it only when its issuer is among the authorities the
// backend names, and a backend naming an intermediate, or none, would then
// see no certificate at all and refuse the Gateway for a reason no status
// could tell.

// backendClient is the compiled client certificate, and the digest that
// joins the key of the transports presenting it, so that a renewed
// certificate is a new transport (and the connections of the old one are
// closed, as a renewed CA bundle's are).
type backendClient struct {
	cert *tls.Certificate
	sum  string
}

// compileBackendClient parses a Config's BackendClientCertificate; nil is
// none.
func compileBackendClient(c *Certificate) (*backendClient, error) {
	if c == nil {
		return nil, nil
	}
	cert, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("backend client certificate: %w", err)
	}
	h := sha256.New()
	h.Write(c.CertPEM)
	h.Write([]byte{0})
	h.Write(c.KeyPEM)
	return &backendClient{cert: &cert, sum: hex.EncodeToString(h.Sum(nil))}, nil
}

// present has cfg offer the client certificate whenever a backend asks.
func (c *backendClient) present(cfg *tls.Config) {
	if c == nil {
		return
	}
	cert := c.cert
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return cert, nil
	}
}
