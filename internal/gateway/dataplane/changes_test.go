package dataplane

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// A configuration whose new port cannot open changes nothing: the ports
// served before keep serving their old programming, and the error names the
// port.
func TestApplyThatCannotOpenAPortChangesNothing(t *testing.T) {
	a, b := echo(t, "a"), echo(t, "b")
	var l loopback
	o := l.options()
	listen := o.ListenTCP
	o.ListenTCP = func(port int32) (net.Listener, error) {
		if port == 81 {
			return nil, errors.New("address already in use")
		}
		return listen(port)
	}
	p := New(o)
	t.Cleanup(p.Close)
	route := func(addr string) []VirtualHost {
		return []VirtualHost{{Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: addr, Weight: 1}}}}}}
	}
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: route(a)}}}); err != nil {
		t.Fatal(err)
	}
	err := p.Apply(&Config{Ports: []Port{{Port: 81, Protocol: HTTP, Hosts: route(b)}, {Port: 82, Protocol: HTTP, Hosts: route(b)}}})
	if err == nil {
		t.Fatal("applied a configuration whose port cannot open")
	}
	resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/")
	if err != nil {
		t.Fatalf("port 80 closed by a failed apply: %v", err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Backend"); got != "a" {
		t.Fatalf("port 80 served by %q after a failed apply, want a", got)
	}
	p.mu.Lock()
	n := len(p.ports)
	p.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d ports open after a failed apply, want the 1 from before", n)
	}
}

// A TLS client naming a host no listener serves gets no certificate at all,
// not another listener's (which would name that tenant's hosts).
func TestUnknownServerNameGetsNoCertificate(t *testing.T) {
	a := echo(t, "a")
	certPEM, keyPEM := testcert.SelfSigned(t, "tenant-a.example.com")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS,
		Certificates: []Certificate{{Hostname: "tenant-a.example.com", CertPEM: certPEM, KeyPEM: keyPEM}},
		Hosts:        []VirtualHost{{Hostname: "tenant-a.example.com", Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: a, Weight: 1}}}}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tenant-a.example.com", "other.example.com", ""} {
		c, err := tls.Dial("tcp", l.at(t, "tcp/443"), &tls.Config{InsecureSkipVerify: true, ServerName: name}) //nolint:gosec // the test's own certificate
		if err == nil {
			c.Close()
		}
		if ok := err == nil; ok != (name == "tenant-a.example.com") {
			t.Errorf("server name %q: handshake error %v", name, err)
		}
	}
}
