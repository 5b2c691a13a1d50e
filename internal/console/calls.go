package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The call layer's metrics (docs/cloud-calls.md) the charts are drawn from.
const (
	metricCalls     = "outrigger_cloud_calls_total"
	metricErrors    = "outrigger_cloud_call_errors_total"
	metricThrottled = "outrigger_cloud_throttled_total"
	metricDuration  = "outrigger_cloud_call_duration_seconds"
	metricLimit     = "outrigger_cloud_family_rate_limit"
)

// Calls is the call charts' data: one point per sampling interval, oldest
// first, per method and per method family.
type Calls struct {
	// Times are the sample times, in Unix milliseconds.
	Times    []int64        `json:"times"`
	Methods  []MethodSeries `json:"methods"`
	Families []FamilySeries `json:"families"`
	// Error is why the last sample failed ("" when it did not).
	Error string `json:"error,omitempty"`
}

// MethodSeries is one cloud method's rates over time. A point is null (NaN
// in Go, encoded as null) when there is no previous sample to compare with.
type MethodSeries struct {
	Method string `json:"method"`
	// Rate, Errors and Throttled are per second over the interval.
	Rate      []Float `json:"rate"`
	Errors    []Float `json:"errors"`
	Throttled []Float `json:"throttled"`
	// LatencyMs is the mean latency of the calls made in the interval.
	LatencyMs []Float `json:"latencyMs"`
}

// FamilySeries is one method family's current rate limit over time.
type FamilySeries struct {
	Family string `json:"family"`
	// Limit is calls per second; null while unlimited.
	Limit []Float `json:"limit"`
}

// Float encodes NaN and ±Inf as JSON null.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return []byte(fmt.Sprintf("%.4g", v)), nil
}

// sample is the counters at one instant, by method (and limits by family).
type sample struct {
	at        time.Time
	calls     map[string]float64
	errors    map[string]float64
	throttled map[string]float64
	durSum    map[string]float64
	durCount  map[string]float64
	limits    map[string]float64
}

// sampler keeps the last size samples of the call layer's metrics.
type sampler struct {
	gather prometheus.Gatherer
	size   int

	mu      sync.Mutex
	samples []sample // ring, oldest first once full
	lastErr error
}

func newSampler(g prometheus.Gatherer, size int) *sampler {
	return &sampler{gather: g, size: size}
}

// take records one sample and returns the timeline entries for what the
// call layer did since the previous one (calls that failed or were
// throttled, by method).
func (s *sampler) take(now time.Time) []Entry {
	mfs, err := s.gather.Gather()
	cur := sample{at: now, calls: map[string]float64{}, errors: map[string]float64{}, throttled: map[string]float64{},
		durSum: map[string]float64{}, durCount: map[string]float64{}, limits: map[string]float64{}}
	for _, mf := range mfs {
		switch mf.GetName() {
		case metricCalls:
			sumBy(mf, "method", cur.calls, counterValue)
		case metricErrors:
			sumBy(mf, "method", cur.errors, counterValue)
		case metricThrottled:
			sumBy(mf, "method", cur.throttled, counterValue)
		case metricLimit:
			sumBy(mf, "family", cur.limits, gaugeValue)
		case metricDuration:
			sumBy(mf, "method", cur.durSum, func(m *dto.Metric) float64 { return m.GetHistogram().GetSampleSum() })
			sumBy(mf, "method", cur.durCount, func(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) })
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	var entries []Entry
	if n := len(s.samples); n > 0 {
		entries = callEntries(s.samples[n-1], cur)
	}
	s.samples = append(s.samples, cur)
	if len(s.samples) > s.size {
		s.samples = slices.Delete(s.samples, 0, len(s.samples)-s.size)
	}
	return entries
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }
func gaugeValue(m *dto.Metric) float64   { return m.GetGauge().GetValue() }

func sumBy(mf *dto.MetricFamily, label string, into map[string]float64, value func(*dto.Metric) float64) {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				into[l.GetValue()] += value(m)
			}
		}
	}
}

// callEntries sums up an interval for the timeline: one entry per method
// that failed or was throttled in it.
func callEntries(prev, cur sample) []Entry {
	var out []Entry
	for _, method := range sortedKeys(cur.calls) {
		calls := cur.calls[method] - prev.calls[method]
		errs := cur.errors[method] - prev.errors[method]
		thr := cur.throttled[method] - prev.throttled[method]
		if errs <= 0 && thr <= 0 {
			continue
		}
		e := Entry{Time: cur.at, Kind: "calls", Type: "Warning", Object: "Cloud/" + method, Reason: "CallsFailed",
			Message: fmt.Sprintf("%s: %.0f calls, %.0f failed, %.0f throttled (429) in %s", method, calls, errs, thr, cur.at.Sub(prev.at).Round(time.Millisecond))}
		if thr > 0 {
			e.Reason = "Throttled"
		}
		out = append(out, e)
	}
	return out
}

func sortedKeys(maps ...map[string]float64) []string {
	set := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// series turns the samples into the charts' data.
func (s *sampler) series() Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Calls{Methods: []MethodSeries{}, Families: []FamilySeries{}}
	if s.lastErr != nil {
		c.Error = s.lastErr.Error()
	}
	var methods, families []string
	if n := len(s.samples); n > 0 {
		methods = sortedKeys(s.samples[n-1].calls)
		families = sortedKeys(s.samples[n-1].limits)
	}
	for _, m := range methods {
		c.Methods = append(c.Methods, MethodSeries{Method: m})
	}
	for _, f := range families {
		c.Families = append(c.Families, FamilySeries{Family: f})
	}
	for i, cur := range s.samples {
		c.Times = append(c.Times, cur.at.UnixMilli())
		for j, m := range methods {
			ms := &c.Methods[j]
			if i == 0 {
				nan := Float(math.NaN())
				ms.Rate, ms.Errors, ms.Throttled, ms.LatencyMs = append(ms.Rate, nan), append(ms.Errors, nan), append(ms.Throttled, nan), append(ms.LatencyMs, nan)
				continue
			}
			prev := s.samples[i-1]
			secs := cur.at.Sub(prev.at).Seconds()
			rate := func(a, b map[string]float64) Float {
				if secs <= 0 {
					return Float(math.NaN())
				}
				return Float(math.Max(0, a[m]-b[m]) / secs)
			}
			ms.Rate = append(ms.Rate, rate(cur.calls, prev.calls))
			ms.Errors = append(ms.Errors, rate(cur.errors, prev.errors))
			ms.Throttled = append(ms.Throttled, rate(cur.throttled, prev.throttled))
			lat := Float(math.NaN())
			if n := cur.durCount[m] - prev.durCount[m]; n > 0 {
				lat = Float((cur.durSum[m] - prev.durSum[m]) / n * 1000)
			}
			ms.LatencyMs = append(ms.LatencyMs, lat)
		}
		for j, f := range families {
			v, ok := cur.limits[f]
			if !ok {
				v = math.NaN()
			}
			c.Families[j].Limit = append(c.Families[j].Limit, Float(v))
		}
	}
	return c
}

// ScrapeGatherer gathers from a /metrics URL: `outrigger console` run apart
// from the manager reads the manager's metrics this way.
type ScrapeGatherer struct {
	URL    string
	Client *http.Client
	// Timeout bounds one scrape. Default 5s.
	Timeout time.Duration
}

// Gather implements prometheus.Gatherer.
func (g ScrapeGatherer) Gather() ([]*dto.MetricFamily, error) {
	timeout := g.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", g.URL, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	client := g.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", g.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", g.URL, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", g.URL, err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for name, mf := range fams {
		if strings.HasPrefix(name, "outrigger_cloud_") {
			out = append(out, mf)
		}
	}
	return out, nil
}
