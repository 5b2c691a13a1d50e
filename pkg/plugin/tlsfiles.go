package plugin

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// The plugin connection's certificates and CAs are files that a rotation
// replaces (cert-manager, a Secret volume): each is read again at the next
// handshake after it changed, so a rotation is no outage. A file caught
// half-written (a key that does not match its certificate yet, a CA that
// holds no certificate) keeps the last good content until it is whole.

// fileStamp tells whether a file changed: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// keyPairFiles is a certificate and its key, read again when either file
// changes.
type keyPairFiles struct {
	certFile, keyFile string
	mu                sync.Mutex
	stamps            [2]fileStamp
	cert              *tls.Certificate
}

func newKeyPairFiles(certFile, keyFile string) (*keyPairFiles, error) {
	k := &keyPairFiles{certFile: certFile, keyFile: keyFile}
	if _, err := k.get(); err != nil {
		return nil, err
	}
	return k, nil
}

// get returns the pair as the files hold it now, or the last good one.
func (k *keyPairFiles) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cs, cerr := stampOf(k.certFile)
	ks, kerr := stampOf(k.keyFile)
	if cerr == nil && kerr == nil && k.cert != nil && cs == k.stamps[0] && ks == k.stamps[1] {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // mid-rotation: the last good pair
		}
		return nil, err
	}
	k.cert, k.stamps = &cert, [2]fileStamp{cs, ks}
	return k.cert, nil
}

// caFile is a CA bundle, read again when the file changes.
type caFile struct {
	file  string
	mu    sync.Mutex
	stamp fileStamp
	pool  *x509.CertPool
}

func newCAFile(file string) (*caFile, error) {
	c := &caFile{file: file}
	if _, err := c.get(); err != nil {
		return nil, err
	}
	return c, nil
}

// get returns the CAs as the file holds them now, or the last good ones.
func (c *caFile) get() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := stampOf(c.file)
	if err == nil && c.pool != nil && st == c.stamp {
		return c.pool, nil
	}
	pool, err := loadPool(c.file)
	if err != nil {
		if c.pool != nil {
			return c.pool, nil
		}
		return nil, err
	}
	c.pool, c.stamp = pool, st
	return c.pool, nil
}

// verifyPeer checks a peer's chain against the CAs as they are now, for
// usage; with sans, the leaf must also name one of them (a DNS name or a
// URI, as SPIFFE IDs are), so that not every certificate the CA ever
// signed may connect.
func verifyPeer(cs tls.ConnectionState, cas *caFile, usage x509.ExtKeyUsage, dnsName string, sans []string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer sent no certificate")
	}
	roots, err := cas.get()
	if err != nil {
		return err
	}
	leaf := cs.PeerCertificates[0]
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		return fmt.Errorf("the peer's certificate: %w", err)
	}
	if len(sans) == 0 {
		return nil
	}
	for _, u := range leaf.URIs {
		if slices.Contains(sans, u.String()) {
			return nil
		}
	}
	for _, d := range leaf.DNSNames {
		if slices.Contains(sans, d) {
			return nil
		}
	}
	return fmt.Errorf("the peer's certificate names none of %v (DNS names %v, URIs %v)", sans, leaf.DNSNames, leaf.URIs)
}

// ServerTLS is a plugin server's TLS: its certificate and key, and with
// clientCA, client certificates required and verified against it (mutual
// TLS), with clientSANs only those naming one of them. Every file is read
// again at the next handshake after it changes.
func ServerTLS(certFile, keyFile, clientCA string, clientSANs []string) (*tls.Config, error) {
	pair, err := newKeyPairFiles(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading --tls-cert and --tls-key: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.get() },
	}
	if clientCA == "" {
		if len(clientSANs) > 0 {
			return nil, errors.New("--tls-client-san needs --tls-client-ca")
		}
		return cfg, nil
	}
	cas, err := newCAFile(clientCA)
	if err != nil {
		return nil, err
	}
	// The chain is verified in VerifyConnection, against the CA file as
	// it is at this handshake; RequireAnyClientCert only asks for one.
	cfg.ClientAuth = tls.RequireAnyClientCert
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyPeer(cs, cas, x509.ExtKeyUsageClientAuth, "", clientSANs)
	}
	return cfg, nil
}

// clientTLS is Outrigger's side: the plugin's certificate verified against
// caFile as it is at each handshake, for the server name (serverName, else
// host: the endpoint's), and Outrigger's own certificate, read again after
// a rotation.
func clientTLS(t *TLSConfig, host string) (*tls.Config, error) {
	if t.CAFile == "" {
		return nil, errors.New("cloud-config tls.caFile is required to verify the plugin")
	}
	cas, err := newCAFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	name := t.ServerName
	if name == "" {
		name = host
	}
	if name == "" {
		return nil, errors.New("no name to verify the plugin's certificate for: set tls.serverName")
	}
	cfg := &tls.Config{
		ServerName: t.ServerName,
		MinVersion: tls.VersionTLS12,
		// Verified in VerifyConnection instead, against the CA file as it
		// is at this handshake (RootCAs would be read once).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPeer(cs, cas, x509.ExtKeyUsageServerAuth, name, nil)
		},
	}
	if t.CertFile != "" || t.KeyFile != "" {
		pair, err := newKeyPairFiles(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading tls.certFile and tls.keyFile: %w", err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get() }
	}
	return cfg, nil
}
