// Package metricstest reads metrics from the registry the manager serves
// (controller-runtime's), so tests check what a scraper would see: a metric
// that is not registered there does not count.
package metricstest

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Family returns the named metric family; the test fails when it is not
// registered or has no series yet.
func Family(t testing.TB, name string) *dto.MetricFamily {
	t.Helper()
	if mf := find(t, name); mf != nil {
		return mf
	}
	t.Fatalf("metric %s is not registered (or has no series)", name)
	return nil
}

// Value sums, over the series of name whose labels include labels, the
// counter or gauge values or the histogram sample counts. A metric with no
// such series reads 0: a labelled counter appears only once counted.
func Value(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mf := find(t, name)
	if mf == nil {
		return 0
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		if !matches(m, labels) {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			sum += float64(m.GetHistogram().GetSampleCount())
		default:
			t.Fatalf("metric %s is a %v", name, mf.GetType())
		}
	}
	return sum
}

func find(t testing.TB, name string) *dto.MetricFamily {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

func matches(m *dto.Metric, labels map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Counter returns a reader of Value(name, labels), for testenv.Consistently's
// passes: a counter's increments or a histogram's samples, each a pass of
// the code that records it.
func Counter(t testing.TB, name string, labels map[string]string) func() float64 {
	return func() float64 {
		t.Helper()
		return Value(t, name, labels)
	}
}
