package plugin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM files in dir.
func pki(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	ca = write("ca.crt", "CERTIFICATE", caDER)
	serverCert, serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	clientCert, clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// Over TCP the plugin requires TLS, and with a client CA, a client
// certificate: Outrigger with one connects, a client without is refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, cc, ck := pki(t, dir)
	cert, err := tls.LoadX509KeyPair(sc, sk)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pemBytes, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(pemBytes)
	ln, err := plugin.Listen("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = plugin.Serve(ctx, ln, &wrong{}, plugin.Info{}) }()
	addr := ln.Addr().String()

	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	p, err := plugin.Dial(dctx, plugin.Config{Endpoint: addr, TLS: &plugin.TLSConfig{CAFile: ca, CertFile: cc, KeyFile: ck}})
	if err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	if p.ProviderName() != "wrong" {
		t.Errorf("ProviderName = %q", p.ProviderName())
	}

	shortCtx, shortCancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer shortCancel()
	if _, err := plugin.Dial(shortCtx, plugin.Config{Endpoint: addr, TLS: &plugin.TLSConfig{CAFile: ca}}); err == nil {
		t.Error("a client without a certificate was served")
	}
}
