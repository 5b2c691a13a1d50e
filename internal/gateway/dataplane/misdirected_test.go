package dataplane

import (
	"crypto/tls"
	"net/http"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// The listeners of one HTTPS port as Gateway API's conformance test has
// them: one without hostname, one exact, one wildcard and one exact name
// under that wildcard. A request is misdirected when its host belongs to
// another listener than its connection's server name.
func TestARequestForAnotherListenersHostIsMisdirected(t *testing.T) {
	listeners := []string{"", "second-example.org", "*.wildcard.org", "fourth-example.wildcard.org"}
	for _, tc := range []struct {
		serverName, host string
		want             bool
	}{
		{"example.org", "example.org", false},
		{"example.org", "second-example.org", true},
		{"example.org", "unknown-example.org", false},
		{"second-example.org", "second-example.org", false},
		{"second-example.org", "SECOND-example.org:443", false},
		{"second-example.org", "example.org", true},
		{"second-example.org", "unknown-example.org", true},
		{"third-example.wildcard.org", "fith-example.wildcard.org", false},
		{"third-example.wildcard.org", "fourth-example.wildcard.org", true},
		{"third-example.wildcard.org", "second-example.org", true},
		{"fourth-example.wildcard.org", "fith-example.wildcard.org", true},
		{"unknown-example.org", "example.org", false},
	} {
		if got := misdirected(listeners, tc.serverName, tc.host); got != tc.want {
			t.Errorf("server name %s, host %s: misdirected %v, want %v", tc.serverName, tc.host, got, tc.want)
		}
	}
	// Without a listener for any host, a host no listener serves is left
	// to the router (404), not misdirected.
	if misdirected([]string{"a.example"}, "a.example", "b.example") {
		t.Error("a host no listener serves was misdirected")
	}
}

// Through the proxy: a client that sends, on its connection to a.example,
// a request for b.example (another listener's host; HTTP/2 clients reuse
// connections so when one certificate covers both names)
// gets 421 and nothing reaches a backend; on a connection of its own it is
// served.
func TestMisdirectedRequestsAreAnswered421(t *testing.T) {
	a, b := echo(t, "a"), echo(t, "b")
	aCert, aKey := testcert.SelfSigned(t, "a.example")
	bCert, bKey := testcert.SelfSigned(t, "b.example")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	route := func(host, addr string) VirtualHost {
		return VirtualHost{Hostname: host, Rules: []Rule{{Match: gwv1.HTTPRouteMatch{Path: prefix("/")}, Backends: []Backend{{Address: addr, Weight: 1}}}}}
	}
	if err := p.Apply(&Config{Ports: []Port{{Port: 443, Protocol: HTTPS,
		Certificates: []Certificate{{Hostname: "a.example", CertPEM: aCert, KeyPEM: aKey}, {Hostname: "b.example", CertPEM: bCert, KeyPEM: bKey}},
		Hosts:        []VirtualHost{route("a.example", a), route("b.example", b)},
	}}}); err != nil {
		t.Fatal(err)
	}
	get := func(serverName, host string) (int, string) {
		t.Helper()
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: serverName}}} //nolint:gosec // the test's own certificate
		req, _ := http.NewRequest(http.MethodGet, "https://"+l.at(t, "tcp/443")+"/", nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Backend")
	}
	if code, backend := get("a.example", "b.example"); code != http.StatusMisdirectedRequest || backend != "" {
		t.Errorf("b.example on a.example's connection: %d from %q, want 421 from the data plane", code, backend)
	}
	if code, backend := get("b.example", "b.example"); code != http.StatusOK || backend != "b" {
		t.Errorf("b.example on its own connection: %d from %q, want 200 from b", code, backend)
	}
	if code, backend := get("a.example", "a.example"); code != http.StatusOK || backend != "a" {
		t.Errorf("a.example on its own connection: %d from %q, want 200 from a", code, backend)
	}
}
