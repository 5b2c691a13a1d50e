package console

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// testDataPlane is a real data plane (the proxy `outrigger
// gateway-dataplane` runs, with its Metrics) on loopback: the console's
// parsing is tested on what the data plane itself exposes.
type testDataPlane struct {
	t   *testing.T
	reg *prometheus.Registry
	mu  sync.Mutex
	at  map[int32]string // listener port -> loopback address
}

// startDataPlane serves, on ports 80 and 8080, route ns/web (a backend
// answering 500 under /web/fail, 200 elsewhere) and, on port 80 only,
// ns/down (a backend nothing listens on).
func startDataPlane(t *testing.T) *testDataPlane {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/web/fail") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(backend.Close)
	d := &testDataPlane{t: t, reg: prometheus.NewRegistry(), at: map[int32]string{}}
	p := dataplane.New(dataplane.Options{ListenTCP: func(port int32) (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			d.mu.Lock()
			d.at[port] = ln.Addr().String()
			d.mu.Unlock()
		}
		return ln, err
	}})
	t.Cleanup(p.Close)
	dataplane.NewMetrics(d.reg, p)
	web := dataplane.Rule{Route: "ns/web", Match: gwv1.HTTPRouteMatch{Path: pathPrefix("/web")},
		Backends: []dataplane.Backend{{Address: strings.TrimPrefix(backend.URL, "http://"), Weight: 1}}}
	// Nothing listens on port 1 of loopback.
	down := dataplane.Rule{Route: "ns/down", Match: gwv1.HTTPRouteMatch{Path: pathPrefix("/down")},
		Backends: []dataplane.Backend{{Address: "127.0.0.1:1", Weight: 1}}}
	if err := p.Apply(&dataplane.Config{Ports: []dataplane.Port{
		{Port: 80, Protocol: dataplane.HTTP, Hosts: []dataplane.VirtualHost{{Rules: []dataplane.Rule{web, down}}}},
		{Port: 8080, Protocol: dataplane.HTTP, Hosts: []dataplane.VirtualHost{{Rules: []dataplane.Rule{web}}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return d
}

func pathPrefix(p string) *gwv1.HTTPPathMatch {
	t := gwv1.PathMatchPathPrefix
	return &gwv1.HTTPPathMatch{Type: &t, Value: &p}
}

// get sends n requests for path to the listener on port.
func (d *testDataPlane) get(port int32, path string, n int) {
	d.t.Helper()
	d.mu.Lock()
	addr := d.at[port]
	d.mu.Unlock()
	c := &http.Client{Timeout: 20 * time.Second}
	for range n {
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			d.t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// exposition is the text /metrics serves.
func (d *testDataPlane) exposition() []byte {
	d.t.Helper()
	families, err := d.reg.Gather()
	if err != nil {
		d.t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			d.t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func parsed(t *testing.T, text []byte) podFigures {
	t.Helper()
	f, err := parsePodMetrics(text)
	if err != nil {
		t.Fatalf("parsing %s: %v", text, err)
	}
	return f
}

func rowNamed(rows []TrafficRow, name string) TrafficRow {
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	return TrafficRow{Name: "missing " + name}
}

// Two pods' figures are summed by port and by route, requests by status
// class, with the upstream errors and latency quantiles; ports name the
// Gateway's listeners on them.
func TestTrafficSummedOverPods(t *testing.T) {
	a, b := startDataPlane(t), startDataPlane(t)
	a.get(80, "/web", 3)
	a.get(80, "/web/fail", 1)
	a.get(80, "/down", 1)
	a.get(80, "/nothing", 1)
	b.get(8080, "/web", 2)
	b.get(80, "/web", 1)

	var got GatewayTraffic
	listeners := []Listener{{Name: "http", Protocol: "HTTP", Port: 80}, {Name: "alt", Protocol: "HTTP", Port: 8080}, {Name: "db", Protocol: "TCP", Port: 5432}}
	aggregateTraffic(&got, []podRead{{uid: "a", figures: parsed(t, a.exposition())}, {uid: "b", figures: parsed(t, b.exposition())}}, nil, 0, listeners)

	if got.PodsRead != 2 || got.RateSeconds != 0 || len(got.Listeners) != 2 || len(got.Routes) != 3 {
		t.Fatalf("traffic %+v", got)
	}
	l80 := rowNamed(got.Listeners, "HTTP/80")
	if l80.Requests != 7 || l80.Codes["2xx"] != 4 || l80.Codes["4xx"] != 1 || l80.Codes["5xx"] != 2 || l80.UpstreamErrors != 1 ||
		len(l80.GatewayListeners) != 1 || l80.GatewayListeners[0] != "http" || l80.Rate != nil {
		t.Errorf("HTTP/80: %+v", l80)
	}
	if l := rowNamed(got.Listeners, "HTTP/8080"); l.Requests != 2 || l.Codes["2xx"] != 2 || l.GatewayListeners[0] != "alt" {
		t.Errorf("HTTP/8080: %+v", l)
	}
	web := got.Routes[0]
	if web.Name != "ns/web" || web.Requests != 7 || web.Codes["2xx"] != 6 || web.Codes["5xx"] != 1 || web.UpstreamErrors != 0 {
		t.Errorf("busiest route %+v, want ns/web with 7 requests", web)
	}
	if web.P50 == nil || web.P99 == nil || *web.P50 <= 0 || *web.P50 > *web.P99 || *web.P99 > 30 {
		t.Errorf("ns/web latency p50 %v p99 %v", web.P50, web.P99)
	}
	if down := rowNamed(got.Routes, "ns/down"); down.Requests != 1 || down.Codes["5xx"] != 1 || down.UpstreamErrors != 1 {
		t.Errorf("ns/down: %+v", down)
	}
	if none := rowNamed(got.Routes, ""); none.Requests != 1 || none.Codes["4xx"] != 1 {
		t.Errorf("requests no route took: %+v", none)
	}
}

// Rates are the increase since the previous read over the pods read both
// times; a pod replaced since (another UID) has none to subtract.
func TestTrafficRates(t *testing.T) {
	d := startDataPlane(t)
	d.get(80, "/web", 2)
	before := map[string]podFigures{"pod-1": parsed(t, d.exposition())}
	d.get(80, "/web", 4)
	now := parsed(t, d.exposition())

	var got GatewayTraffic
	aggregateTraffic(&got, []podRead{{uid: "pod-1", figures: now}}, before, 2, nil)
	web := rowNamed(got.Routes, "ns/web")
	if got.RateSeconds != 2 || web.Requests != 6 || web.Rate == nil || *web.Rate != 2 {
		t.Errorf("rate %v over %vs, %v requests; want 2/s over 2s, 6", web.Rate, got.RateSeconds, web.Requests)
	}
	if l := rowNamed(got.Listeners, "HTTP/80"); l.Rate == nil || *l.Rate != 2 {
		t.Errorf("HTTP/80 rate %v, want 2/s", l.Rate)
	}

	var replaced GatewayTraffic
	aggregateTraffic(&replaced, []podRead{{uid: "pod-2", figures: now}}, before, 2, nil)
	if r := rowNamed(replaced.Routes, "ns/web"); replaced.RateSeconds != 0 || r.Rate != nil {
		t.Errorf("a replaced pod: rate %v over %vs, want none", r.Rate, replaced.RateSeconds)
	}
}

func TestParseRefusesOtherMetrics(t *testing.T) {
	if _, err := parsePodMetrics([]byte("# TYPE up gauge\nup 1\n")); err == nil {
		t.Error("metrics without the data plane's series were taken")
	}
	if _, err := parsePodMetrics([]byte("<html>not metrics")); err == nil {
		t.Error("an HTML page was taken")
	}
}

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		q       float64
		buckets map[float64]float64
		want    string
	}{
		{0.5, map[float64]float64{0.1: 0, 0.25: 10, inf: 10}, "0.175"},
		{0.5, map[float64]float64{0.1: 4, 0.25: 4, 1: 8, inf: 8}, "0.1"},
		{0.99, map[float64]float64{0.1: 1, 1: 1, inf: 5}, "1"}, // above the highest bound: that bound
		{0.5, map[float64]float64{0.005: 10, inf: 10}, "0.0025"},
		{0.5, map[float64]float64{0.1: 0, inf: 0}, "none"},
		{0.5, map[float64]float64{}, "none"},
	} {
		got := "none"
		if v := quantile(tc.q, tc.buckets); v != nil {
			got = fmt.Sprintf("%.4g", *v)
		}
		if got != tc.want {
			t.Errorf("quantile(%v, %v) = %s, want %s", tc.q, tc.buckets, got, tc.want)
		}
	}
}
