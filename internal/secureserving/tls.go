package secureserving

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	certutil "k8s.io/client-go/util/cert"
	cliflag "k8s.io/component-base/cli/flag"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// servingPairName names the self-signed pair written to --cert-dir, as
// upstream's.
const servingPairName = "cloud-controller-manager"

// tlsSettings turns the TLS flags into a tls.Config mutator, or says what
// is wrong with them.
func (s *ServingOptions) tlsSettings() (func(*tls.Config), []error) {
	var errs []error
	minVersion, err := cliflag.TLSVersion(s.MinTLSVersion)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-min-version: %w", err))
	}
	suites, err := cliflag.TLSCipherSuites(s.CipherSuites)
	if err != nil {
		errs = append(errs, fmt.Errorf("--tls-cipher-suites: %w", err))
	}
	var curves []tls.CurveID
	for _, c := range s.CurvePreferences {
		curves = append(curves, tls.CurveID(c))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return func(c *tls.Config) {
		if minVersion != 0 {
			c.MinVersion = minVersion
		}
		if len(suites) > 0 {
			c.CipherSuites = suites
		}
		if len(curves) > 0 {
			c.CurvePreferences = curves
		}
		if s.DisableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		} else if !slices.Contains(c.NextProtos, "h2") {
			c.NextProtos = append([]string{"h2"}, c.NextProtos...)
		}
	}, nil
}

// certificates returns GetCertificate for the port: the SNI certificates by
// name, else --tls-cert-file (reloaded when it changes), else a self-signed
// pair in --cert-dir, else one in memory. The watcher, when there is one,
// must run to keep the file's certificate current.
func (s *ServingOptions) certificates() (func(*tls.ClientHelloInfo) (*tls.Certificate, error), *certwatcher.CertWatcher, error) {
	var (
		def     func(*tls.ClientHelloInfo) (*tls.Certificate, error)
		watcher *certwatcher.CertWatcher
	)
	certFile, keyFile := s.CertFile, s.KeyFile
	if certFile == "" && s.CertDir != "" {
		certFile = filepath.Join(s.CertDir, servingPairName+".crt")
		keyFile = filepath.Join(s.CertDir, servingPairName+".key")
		if err := ensureSelfSigned(certFile, keyFile); err != nil {
			return nil, nil, fmt.Errorf("--cert-dir %s: %w", s.CertDir, err)
		}
	}
	if certFile != "" {
		w, err := certwatcher.New(certFile, keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("loading the serving certificate %s: %w", certFile, err)
		}
		def, watcher = w.GetCertificate, w
	} else {
		cert, err := selfSigned()
		if err != nil {
			return nil, nil, err
		}
		def = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }
	}
	byName := map[string]*tls.Certificate{}
	for _, nck := range s.SNICertKeys {
		cert, err := tls.LoadX509KeyPair(nck.CertFile, nck.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-sni-cert-key %s: %w", nck.CertFile, err)
		}
		names := nck.Names
		if len(names) == 0 {
			leaf, err := x509.ParseCertificate(cert.Certificate[0])
			if err != nil {
				return nil, nil, fmt.Errorf("--tls-sni-cert-key %s: %w", nck.CertFile, err)
			}
			names = append(slices.Clone(leaf.DNSNames), leaf.Subject.CommonName)
		}
		for _, n := range names {
			byName[strings.ToLower(n)] = &cert
		}
	}
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c, ok := byName[strings.ToLower(hello.ServerName)]; ok {
			return c, nil
		}
		return def(hello)
	}, watcher, nil
}

// ensureSelfSigned writes a self-signed pair unless both files exist, as
// upstream does in --cert-dir.
func ensureSelfSigned(certFile, keyFile string) error {
	if _, err := os.Stat(certFile); err == nil {
		if _, err := os.Stat(keyFile); err == nil {
			return nil
		}
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return fmt.Errorf("generating a self-signed certificate: %w", err)
	}
	if err := certutil.WriteCert(certFile, cert); err != nil {
		return fmt.Errorf("writing the self-signed certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return fmt.Errorf("writing the self-signed certificate's key: %w", err)
	}
	return nil
}

func selfSigned() (*tls.Certificate, error) {
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, fmt.Errorf("generating a self-signed serving certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("loading the self-signed serving certificate: %w", err)
	}
	return &pair, nil
}

// listenConfig honours --permit-address-sharing and --permit-port-sharing.
func (s *ServingOptions) listenConfig() net.ListenConfig {
	return net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if s.PermitAddressSharing {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1))
			}
			if s.PermitPortSharing {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1))
			}
		})
		return errors.Join(err, serr)
	}}
}
