package secureserving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// clientWith is an HTTPS client presenting the certificate, keeping its
// connections (a rotation must not need new ones to take effect).
func clientWith(t *testing.T, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}}}
}

func status(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// --client-ca-file rotates to a new CA while clients call: through the
// bundle of both, no call of the old CA's client fails and the new CA's
// client is let in; once the file holds only the new CA, the old CA's
// client is refused. The port never restarts, and a client's open
// connection follows the file too.
func TestClientCARotatesUnderLoad(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	oldCA, newCA := testcert.NewCA(t, "old CA"), testcert.NewCA(t, "new CA")
	// system:masters: authorized without asking an API server (none runs).
	admin := pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}
	oldCert, oldKey := oldCA.Issue(t, admin, x509.ExtKeyUsageClientAuth)
	newCert, newKey := newCA.Issue(t, admin, x509.ExtKeyUsageClientAuth)
	testcert.Replace(t, caFile, oldCA.PEM)

	port := freeport.Reserve(t)
	o := Options{Metrics: prometheus.NewRegistry()}
	o.Authentication.ClientCAFile = caFile
	s := newTestServer(t, port, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	oldClient, newClient := clientWith(t, oldCert, oldKey), clientWith(t, newCert, newKey)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 30s: %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the old CA's client served", func() bool { return status(oldClient, url) == http.StatusOK })
	if code := status(newClient, url); code != http.StatusUnauthorized {
		t.Fatalf("the new CA's client before the rotation: %d, want 401", code)
	}

	// Load: four callers of the old CA's, each on its own kept connection,
	// until told to stop (bounded: at most 30 s).
	var (
		stop     atomic.Bool
		calls    atomic.Int64
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	loadDeadline := time.Now().Add(30 * time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clientWith(t, oldCert, oldKey)
			for !stop.Load() && time.Now().Before(loadDeadline) {
				calls.Add(1)
				if status(c, url) != http.StatusOK {
					failures.Add(1)
				}
			}
		}()
	}
	before := calls.Load()
	testcert.Replace(t, caFile, append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	waitFor("the new CA's client served once the bundle holds both CAs", func() bool { return status(newClient, url) == http.StatusOK })
	waitFor("calls under load across the change", func() bool { return calls.Load() > before+100 })
	stop.Store(true)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Errorf("%d of %d calls of the old CA's client failed while the bundle held both CAs", n, calls.Load())
	}

	testcert.Replace(t, caFile, newCA.PEM)
	waitFor("the old CA's client refused once the file holds only the new CA", func() bool { return status(oldClient, url) == http.StatusUnauthorized })
	if code := status(newClient, url); code != http.StatusOK {
		t.Errorf("the new CA's client after the rotation: %d, want 200", code)
	}
}
