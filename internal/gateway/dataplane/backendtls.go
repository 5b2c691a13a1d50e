package dataplane

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A backend with a BackendTLS is reached over TLS: the server name sent
// is its hostname, and the certificate must lead to its certificate
// authorities (or the system's) and be valid for the hostname or, when
// subjectAltNames are given, for one of them. A backend whose
// certificate fails is unreachable (503): nothing of the request is sent.

// backendTLSConn is a compiled BackendTLS: the client configuration, and the
// key under which backends of the same settings share a transport (and
// its idle connections).
type backendTLSConn struct {
	key    string
	config *tls.Config
}

// CheckBackendTLS says why the data plane would refuse a BackendTLS, as
// it compiles it; the controller refuses the same first.
func CheckBackendTLS(t *BackendTLS) error {
	_, err := compileBackendTLS(t, nil)
	return err
}

// compileBackendTLS compiles t; client (nil: none) is the certificate
// presented to the backend when it asks for one.
func compileBackendTLS(t *BackendTLS, client *backendClient) (*backendTLSConn, error) {
	if t == nil {
		return nil, nil
	}
	if t.Hostname == "" {
		return nil, errors.New("backend TLS without a hostname")
	}
	var roots *x509.CertPool // nil: the system's
	switch {
	case t.WellKnownSystem && len(t.CAPEM) > 0:
		return nil, errors.New("backend TLS with both certificate authorities and the system's")
	case !t.WellKnownSystem:
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(t.CAPEM) {
			return nil, errors.New("backend TLS without a certificate authority that parses")
		}
	}
	for _, san := range t.SubjectAltNames {
		switch san.Type {
		case gwv1.HostnameSubjectAltNameType:
			if san.Hostname == "" {
				return nil, errors.New("backend TLS subjectAltName of type Hostname without a hostname")
			}
		case gwv1.URISubjectAltNameType:
			if _, err := url.Parse(string(san.URI)); err != nil || san.URI == "" {
				return nil, fmt.Errorf("backend TLS subjectAltName URI %q is not a URI", san.URI)
			}
		default:
			return nil, fmt.Errorf("backend TLS subjectAltName of type %q not served", san.Type)
		}
	}
	enc, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("backend TLS: %w", err)
	}
	if client != nil {
		// Backends of the same settings share a transport only when
		// they present the same client certificate too.
		enc = append(enc, client.sum...)
	}
	sum := sha256.Sum256(enc)
	hostname, sans := t.Hostname, t.SubjectAltNames
	conn := &backendTLSConn{
		key: hex.EncodeToString(sum[:]),
		config: &tls.Config{
			ServerName: hostname,
			MinVersion: tls.VersionTLS12,
			// Go verifies the chain and the server name as one; with
			// subjectAltNames the name checked is not the one sent, so
			// verifyBackend does both, for every connection.
			InsecureSkipVerify: true, //nolint:gosec // verifyBackend verifies the certificate
			VerifyConnection: func(cs tls.ConnectionState) error {
				return verifyBackend(cs.PeerCertificates, roots, hostname, sans)
			},
		},
	}
	client.present(conn.config)
	return conn, nil
}

// verifyBackend checks a backend's certificate chain against roots (nil:
// the system's) and its names: the hostname, or one of sans when given.
func verifyBackend(chain []*x509.Certificate, roots *x509.CertPool, hostname string, sans []gwv1.SubjectAltName) error {
	if len(chain) == 0 {
		return errors.New("backend sent no certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if len(sans) == 0 {
		opts.DNSName = hostname
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("backend certificate: %w", err)
	}
	if len(sans) > 0 && !holdsSAN(leaf, sans) {
		return errors.New("backend certificate holds none of the subjectAltNames asked")
	}
	return nil
}

// holdsSAN says whether a certificate holds one of sans: a hostname as
// hostname verification matches it (wildcards included), a URI exactly.
func holdsSAN(leaf *x509.Certificate, sans []gwv1.SubjectAltName) bool {
	for _, s := range sans {
		switch s.Type {
		case gwv1.HostnameSubjectAltNameType:
			if leaf.VerifyHostname(string(s.Hostname)) == nil {
				return true
			}
		case gwv1.URISubjectAltNameType:
			for _, u := range leaf.URIs {
				if u.String() == string(s.URI) {
					return true
				}
			}
		}
	}
	return false
}

// tlsTransport is the transport of a TLS backend's settings, made at
// first use and shared by the backends (and programmings) with the same:
// HTTP/2 or HTTP/1.1, as ALPN agrees with the backend.
func (t *backendTransport) tlsTransport(b *backendTLSConn) *http.Transport {
	if v, ok := t.tls.Load(b.key); ok {
		return v.(*http.Transport)
	}
	v, _ := t.tls.LoadOrStore(b.key, &http.Transport{
		DialContext:         t.dial,
		TLSClientConfig:     b.config,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	})
	return v.(*http.Transport)
}

// retainTLS forgets the transports of settings no longer programmed,
// closing their idle connections: a renewed CA bundle is a new key.
func (t *backendTransport) retainTLS(keep map[string]bool) {
	t.tls.Range(func(k, v any) bool {
		if !keep[k.(string)] {
			t.tls.Delete(k)
			v.(*http.Transport).CloseIdleConnections()
		}
		return true
	})
}
