package dataplane

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// No request is lost to a change: while clients send requests over kept
// and new connections, the routes are changed and the certificate rotated
// over and over (at least fifty times, at most a thousand); every request
// of the route that stays is answered 200.
func TestNoRequestLostToChanges(t *testing.T) {
	a, b := echo(t, "a"), echo(t, "b")
	certs := make([][2][]byte, 2)
	for i := range certs {
		certPEM, keyPEM := testcert.SelfSigned(t, "secure.example.com")
		certs[i] = [2][]byte{certPEM, keyPEM}
	}
	cfg := func(i int) *Config {
		rules := []Rule{{Route: "ns/stays", Match: gwv1.HTTPRouteMatch{Path: prefix("/stays")}, Backends: []Backend{{Address: a, Weight: 1}}}}
		// Other routes come and go around it.
		for j := range i % 7 {
			rules = append(rules, Rule{Route: fmt.Sprintf("ns/extra-%d", j), Match: gwv1.HTTPRouteMatch{Path: prefix(fmt.Sprintf("/extra-%d", j))},
				Backends: []Backend{{Address: b, Weight: 1}}})
		}
		c := certs[i%2]
		return &Config{Ports: []Port{
			{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}},
			{Port: 443, Protocol: HTTPS, Certificates: []Certificate{{Hostname: "secure.example.com", CertPEM: c[0], KeyPEM: c[1]}},
				Hosts: []VirtualHost{{Rules: rules}}},
		}}
	}
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(cfg(0)); err != nil {
		t.Fatal(err)
	}
	plain, secure := "http://"+l.at(t, "tcp/80")+"/stays", "https://"+l.at(t, "tcp/443")+"/stays"
	kept := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "secure.example.com"}}}                           //nolint:gosec // the test's own certificates
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "secure.example.com"}}} //nolint:gosec // the test's own certificates

	const perClient = 300
	var failed, served atomic.Int64
	var errs sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range []struct {
		client *http.Client
		url    string
	}{{kept, plain}, {kept, secure}, {fresh, plain}, {fresh, secure}} {
		wg.Go(func() {
			for range perClient {
				resp, err := c.client.Get(c.url)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					errs.Store(err.Error(), true)
				} else {
					served.Add(1)
				}
			}
		})
	}
	changes := make(chan error, 1)
	var applied atomic.Int64
	go func() {
		defer close(changes)
		for i := 1; i <= 1000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Apply(cfg(i)); err != nil {
				changes <- err
				return
			}
			applied.Add(1)
		}
	}()
	wg.Wait()
	close(stop)
	if err := <-changes; err != nil {
		t.Fatal(err)
	}
	if n := failed.Load(); n > 0 {
		var list []string
		errs.Range(func(k, _ any) bool { list = append(list, k.(string)); return len(list) < 5 })
		t.Fatalf("%d of %d requests failed across the changes: %v", n, 4*perClient, list)
	}
	if n := applied.Load(); n < 50 {
		t.Fatalf("only %d changes applied while the clients ran", n)
	}
	if served.Load() != 4*perClient {
		t.Fatalf("served %d, want %d", served.Load(), 4*perClient)
	}
}
