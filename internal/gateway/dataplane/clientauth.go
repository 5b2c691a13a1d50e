package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// A Gateway's spec.tls.frontend has an HTTPS port ask its clients for a
// certificate and check it against the certificate authorities its
// ConfigMaps give (Gateway API's frontend client certificate validation):
// AllowValidOnly refuses the handshake of a client without a valid one;
// AllowInsecureFallback asks for one but serves every client, and leaves
// the decision to the backend.

// clientAuth is how an HTTPS port checks client certificates.
type clientAuth struct {
	mode tls.ClientAuthType
	pool *x509.CertPool
}

// compileClientAuth parses an HTTPS port's client validation; nil when it
// has none.
func compileClientAuth(port Port) (*clientAuth, error) {
	cv := port.ClientValidation
	if cv == nil {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cv.CAPEM) {
		return nil, fmt.Errorf("port %d: client validation names no PEM certificate authority", port.Port)
	}
	ca := &clientAuth{mode: tls.RequireAndVerifyClientCert, pool: pool}
	if cv.InsecureFallback {
		// Asked for, not checked: a client whose certificate fails is
		// served too, as one without.
		ca.mode = tls.RequestClientCert
	}
	return ca, nil
}

// serverTLS is an HTTPS port's TLS configuration: the certificate by SNI
// and, per handshake, the client validation its programming has now (a
// change applies to the next handshake without a new server).
func serverTLS(s *served) *tls.Config {
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// What ServeTLS offers by ALPN; a configuration returned per
		// handshake must offer it too.
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pickCertificate(*s.certs.Load(), hello.ServerName)
		},
	}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		ca := s.clientAuth.Load()
		if ca == nil {
			return nil, nil
		}
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientAuth, c.ClientCAs = ca.mode, ca.pool
		return c, nil
	}
	return base
}
