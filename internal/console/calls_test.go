package console

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// callMetrics are the call layer's collectors under their names, in a
// registry of the test's own.
type callMetrics struct {
	reg                      *prometheus.Registry
	calls, errors, throttled *prometheus.CounterVec
	duration                 *prometheus.HistogramVec
	limit                    *prometheus.GaugeVec
}

func newCallMetrics() callMetrics {
	m := callMetrics{
		reg:       prometheus.NewRegistry(),
		calls:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricCalls}, []string{"method"}),
		errors:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricErrors}, []string{"method"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricThrottled}, []string{"method"}),
		duration:  prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricDuration}, []string{"method"}),
		limit:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricLimit}, []string{"family"}),
	}
	m.reg.MustRegister(m.calls, m.errors, m.throttled, m.duration, m.limit)
	return m
}

func TestSamplerSeries(t *testing.T) {
	m := newCallMetrics()
	s := newSampler(m.reg, 3)
	t0 := time.Unix(1000, 0)
	m.calls.WithLabelValues("EnsureLoadBalancer").Add(1)
	m.limit.WithLabelValues("loadbalancer").Set(math.Inf(1))
	if got := s.take(t0); got != nil {
		t.Errorf("first sample has no interval to report: %+v", got)
	}
	// Two seconds: 10 calls, 4 of them failed, 2 of those throttled, at
	// 50ms each; the family slowed to 5/s.
	m.calls.WithLabelValues("EnsureLoadBalancer").Add(10)
	m.errors.WithLabelValues("EnsureLoadBalancer").Add(4)
	m.throttled.WithLabelValues("EnsureLoadBalancer").Add(2)
	for range 10 {
		m.duration.WithLabelValues("EnsureLoadBalancer").Observe(0.05)
	}
	m.limit.WithLabelValues("loadbalancer").Set(5)
	entries := s.take(t0.Add(2 * time.Second))
	if len(entries) != 1 || entries[0].Reason != "Throttled" || entries[0].Object != "Cloud/EnsureLoadBalancer" ||
		entries[0].Message != "EnsureLoadBalancer: 10 calls, 4 failed, 2 throttled (429) in 2s" {
		t.Errorf("timeline entries: %+v", entries)
	}
	c := s.series()
	if len(c.Times) != 2 || len(c.Methods) != 1 || len(c.Families) != 1 {
		t.Fatalf("series: %+v", c)
	}
	ms := c.Methods[0]
	want := map[string][2]float64{"rate": {float64(ms.Rate[1]), 5}, "errors": {float64(ms.Errors[1]), 2}, "throttled": {float64(ms.Throttled[1]), 1}, "latency": {float64(ms.LatencyMs[1]), 50}}
	for name, gw := range want {
		if math.Abs(gw[0]-gw[1]) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, gw[0], gw[1])
		}
	}
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// The first point has nothing to compare with, and an unlimited
	// family has no number: both are null in JSON.
	if !strings.Contains(string(data), `"rate":[null,5]`) || !strings.Contains(string(data), `"limit":[null,5]`) {
		t.Errorf("JSON: %s", data)
	}
	// The ring keeps the last 3 samples.
	for i := range 3 {
		s.take(t0.Add(time.Duration(3+i) * time.Second))
	}
	if c := s.series(); len(c.Times) != 3 || c.Times[0] != t0.Add(3*time.Second).UnixMilli() {
		t.Errorf("ring: %v", c.Times)
	}
}

func TestScrapeGatherer(t *testing.T) {
	m := newCallMetrics()
	m.calls.WithLabelValues("InstanceMetadata").Add(3)
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "workqueue_adds_total"})
	m.reg.MustRegister(other)
	srv := httptest.NewServer(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	mfs, err := ScrapeGatherer{URL: srv.URL}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if len(mfs) != 1 || mfs[0].GetName() != metricCalls || mfs[0].GetMetric()[0].GetCounter().GetValue() != 3 {
		t.Errorf("gathered %v; want only %s = 3", names, metricCalls)
	}

	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	if _, err := (ScrapeGatherer{URL: notFound.URL}).Gather(); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a failed scrape says so: %v", err)
	}
}
