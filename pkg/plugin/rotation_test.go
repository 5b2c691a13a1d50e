package plugin_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

func serveTLSPlugin(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := plugin.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = plugin.Serve(ctx, ln, &wrong{}, plugin.Info{}) }()
	return ln.Addr().String()
}

func dialPlugin(addr string, tc *plugin.TLSConfig) (interface{ Ready(context.Context) error }, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	p, err := plugin.Dial(ctx, plugin.Config{Endpoint: addr, TLS: tc})
	if err != nil {
		return nil, err
	}
	return p.(interface{ Ready(context.Context) error }), nil
}

// The certificates and CAs of both ends rotate, to a new CA, while calls
// run: none of those calls fails, the next connections use the new files,
// and a client with the old CA's certificate is refused once the plugin's
// client CA file holds only the new CA. Nothing restarts.
func TestCertificatesRotateUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := func(n string) string { return filepath.Join(dir, n) }
	oldCA, newCA := testcert.NewCA(t, "old CA"), testcert.NewCA(t, "new CA")
	write := func(ca *testcert.CA, caBundle []byte) {
		sc, sk := ca.Issue(t, pkix.Name{CommonName: "plugin"}, x509.ExtKeyUsageServerAuth)
		cc, ck := ca.Issue(t, pkix.Name{CommonName: "outrigger"}, x509.ExtKeyUsageClientAuth)
		testcert.Replace(t, path("ca.crt"), caBundle)
		for name, data := range map[string][]byte{"server.crt": sc, "server.key": sk, "client.crt": cc, "client.key": ck} {
			testcert.Replace(t, path(name), data)
		}
	}
	write(oldCA, oldCA.PEM)
	cfg, err := plugin.ServerTLS(path("server.crt"), path("server.key"), path("ca.crt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLSPlugin(t, cfg)
	tc := &plugin.TLSConfig{CAFile: path("ca.crt"), CertFile: path("client.crt"), KeyFile: path("client.key")}
	p, err := dialPlugin(addr, tc)
	if err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	oldClientCert, _ := os.ReadFile(path("client.crt"))
	oldClientKey, _ := os.ReadFile(path("client.key"))

	// Load: calls over the open connection, bounded in count.
	var calls, failed atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := p.Ready(ctx); err != nil {
					failed.Add(1)
				}
				cancel()
				calls.Add(1)
			}
		}()
	}
	for calls.Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	// Both CAs trusted while the certificates change, then the new only.
	write(newCA, append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	during := calls.Load()
	if _, err := dialPlugin(addr, tc); err != nil {
		t.Errorf("a new connection with the new certificates, both CAs trusted: %v", err)
	}
	testcert.Replace(t, path("ca.crt"), newCA.PEM)
	for calls.Load() < during+50 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls over the open connection failed during the rotation", n, calls.Load())
	}

	// New connections: the new certificates, the new CA only.
	if _, err := dialPlugin(addr, tc); err != nil {
		t.Errorf("a new connection after the rotation: %v", err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(path("client.crt"), path("client.key"))
			return &c, err
		}})
	if err != nil {
		t.Fatalf("a raw TLS connection with the new client certificate: %v", err)
	}
	if issuer := conn.ConnectionState().PeerCertificates[0].Issuer.CommonName; issuer != "new CA" {
		t.Errorf("the plugin presents a certificate of %q after the rotation, want the new CA's", issuer)
	}
	_ = conn.Close()
	stale := filepath.Join(t.TempDir(), "stale")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"client.crt": oldClientCert, "client.key": oldClientKey, "ca.crt": newCA.PEM} {
		testcert.Replace(t, filepath.Join(stale, name), data)
	}
	if _, err := dialPlugin(addr, &plugin.TLSConfig{CAFile: filepath.Join(stale, "ca.crt"), CertFile: filepath.Join(stale, "client.crt"), KeyFile: filepath.Join(stale, "client.key")}); err == nil {
		t.Error("a client with the old CA's certificate was served after the plugin's client CA rotated")
	}
}

// With --tls-client-san, a client certificate from the CA must also name
// the configured identity: the CA's other certificates are refused.
func TestClientIdentityPinned(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "CA")
	sc, sk := ca.Issue(t, pkix.Name{CommonName: "plugin"}, x509.ExtKeyUsageServerAuth)
	pinned, pinnedKey := ca.Issue(t, pkix.Name{CommonName: "outrigger"}, x509.ExtKeyUsageClientAuth, "spiffe://cluster.local/ns/kube-system/sa/cloud-controller-manager")
	other, otherKey := ca.Issue(t, pkix.Name{CommonName: "someone"}, x509.ExtKeyUsageClientAuth, "spiffe://cluster.local/ns/default/sa/app")
	files := map[string][]byte{"ca.crt": ca.PEM, "server.crt": sc, "server.key": sk, "pinned.crt": pinned, "pinned.key": pinnedKey, "other.crt": other, "other.key": otherKey}
	for name, data := range files {
		testcert.Replace(t, filepath.Join(dir, name), data)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	cfg, err := plugin.ServerTLS(p("server.crt"), p("server.key"), p("ca.crt"), []string{"spiffe://cluster.local/ns/kube-system/sa/cloud-controller-manager"})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLSPlugin(t, cfg)
	if _, err := dialPlugin(addr, &plugin.TLSConfig{CAFile: p("ca.crt"), CertFile: p("pinned.crt"), KeyFile: p("pinned.key")}); err != nil {
		t.Errorf("the pinned identity: %v", err)
	}
	if _, err := dialPlugin(addr, &plugin.TLSConfig{CAFile: p("ca.crt"), CertFile: p("other.crt"), KeyFile: p("other.key")}); err == nil {
		t.Error("another certificate of the same CA was served")
	}
	if _, err := plugin.ServerTLS(p("server.crt"), p("server.key"), "", []string{"spiffe://x"}); err == nil {
		t.Error("a pinned identity without a client CA was accepted")
	}
}
