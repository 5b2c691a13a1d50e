package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// servingCerts writes into a new directory what envtest would otherwise
// generate (the API server's serving pair, the service-account signing
// pair) and a client pair for reaching kubelets, with a serving certificate
// for localhost, 127.0.0.1 and names. envtest names only localhost and its
// bind address, so a pod that reaches the API server through the kubernetes
// Service (its ClusterIP) could not verify it. It returns the directory and
// the CA clients must trust.
func servingCerts(names []string) (dir string, caPEM []byte, err error) {
	dir, err = os.MkdirTemp("", "outrigger-apiserver-certs-")
	if err != nil {
		return "", nil, fmt.Errorf("certificate directory: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	ca, err := newPair(&x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "outrigger-apiserver-ca"},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil)
	if err != nil {
		return "", nil, fmt.Errorf("API server CA: %w", err)
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			serving.IPAddresses = append(serving.IPAddresses, ip)
		} else {
			serving.DNSNames = append(serving.DNSNames, n)
		}
	}
	pairs := []struct {
		file, what string
		tmpl       *x509.Certificate
		signer     *pair // nil: self-signed
	}{
		{"apiserver", "API server serving certificate", serving, ca},
		// The API server's client certificate towards kubelets (logs,
		// exec, port-forward), from the same CA: a kubelet trusting ca.crt
		// as its client CA accepts it.
		{"kubelet-client", "API server kubelet client certificate", &x509.Certificate{
			SerialNumber: big.NewInt(4),
			Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, ca},
		// The service-account token signer: envtest's file names, as its
		// flags point at them.
		{"sa-signer", "service-account signer", &x509.Certificate{
			SerialNumber: big.NewInt(3),
			Subject:      pkix.Name{CommonName: "outrigger-service-accounts"},
			KeyUsage:     x509.KeyUsageDigitalSignature,
		}, nil},
	}
	for _, p := range pairs {
		made, err := newPair(p.tmpl, p.signer)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", p.what, err)
		}
		if err := made.write(dir, p.file); err != nil {
			return "", nil, err
		}
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o644); err != nil {
		return "", nil, err
	}
	return dir, caPEM, nil
}

// pair is a certificate and its key.
type pair struct {
	der  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPair makes a key and a week-long certificate from tmpl, signed by
// signer (self-signed when nil).
func newPair(tmpl *x509.Certificate, signer *pair) (*pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(7*24*time.Hour)
	parent, parentKey := tmpl, key
	if signer != nil {
		parent, parentKey = signer.cert, signer.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &pair{der: der, cert: cert, key: key}, nil
}

// write writes name.crt and name.key in dir.
func (p *pair) write(dir, name string) error {
	keyDER, err := x509.MarshalECPrivateKey(p.key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}
