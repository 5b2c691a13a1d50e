package dataplane

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Requests are counted by the listener they came in on, the route that
// took them and their status, an unreachable backend as an upstream error
// of its listener and route, a request no route takes under route "".
func TestMetricsByRoute(t *testing.T) {
	a := echo(t, "a")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, p)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Route: "ns/web", Match: gwv1.HTTPRouteMatch{Path: prefix("/web")}, Backends: []Backend{{Address: a, Weight: 1}}},
		// Nothing listens on port 1 of loopback.
		{Route: "ns/down", Match: gwv1.HTTPRouteMatch{Path: prefix("/down")}, Backends: []Backend{{Address: "127.0.0.1:1", Weight: 1}}},
	}}}}, {Port: 8080, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{Route: "ns/web", Match: gwv1.HTTPRouteMatch{Path: prefix("/web")}, Backends: []Backend{{Address: a, Weight: 1}}},
	}}}}}}); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 20 * time.Second}
	for _, get := range []struct{ port, path string }{{"tcp/80", "/web"}, {"tcp/80", "/web"}, {"tcp/80", "/down"}, {"tcp/80", "/nothing"}, {"tcp/8080", "/web"}} {
		resp, err := c.Get("http://" + l.at(t, get.port) + get.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, tc := range []struct {
		route, code string
		want        float64
	}{{"ns/web", "200", 2}, {"ns/down", "503", 1}, {"", "404", 1}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues("HTTP/80", tc.route, tc.code)); got != tc.want {
			t.Errorf("requests{listener=HTTP/80,route=%q,code=%s} = %v, want %v", tc.route, tc.code, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("HTTP/8080", "ns/web", "200")); got != 1 {
		t.Errorf("requests{listener=HTTP/8080,route=ns/web,code=200} = %v, want 1: each port counts its own", got)
	}
	if got := testutil.ToFloat64(m.upstream.WithLabelValues("HTTP/80", "ns/down")); got != 1 {
		t.Errorf("upstream errors of ns/down = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "outrigger_gateway_request_duration_seconds"); err != nil || n != 4 {
		t.Errorf("duration series %d (%v), want one per listener and route seen", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "outrigger_gateway_connections_refused_total"); err == nil {
		// The family exists: an empty expectation must not match it.
		t.Error("connections_refused_total not registered")
	}
}
