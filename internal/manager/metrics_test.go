package manager

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// A provider's metric registered in component-base's legacy registry, as
// cloud-provider-aws registers its API call counters, is served on
// /metrics beside Outrigger's, and a family both registries hold (the Go
// runtime's) is served once.
func TestProviderMetricsServed(t *testing.T) {
	calls := metrics.NewCounterVec(&metrics.CounterOpts{Name: "test_provider_cloud_api_calls_total", Help: "Test.", StabilityLevel: metrics.ALPHA}, []string{"request"})
	legacyregistry.MustRegister(calls)
	calls.WithLabelValues("DescribeInstances").Inc()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_outrigger_own_total", Help: "Test."})
	reg := prometheus.NewRegistry()
	reg.MustRegister(own, collectors.NewGoCollector())
	families, err := mergedGatherer{reg, legacyregistry.DefaultGatherer}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, f := range families {
		count[f.GetName()]++
	}
	for _, name := range []string{"test_provider_cloud_api_calls_total", "test_outrigger_own_total", "go_goroutines"} {
		if count[name] != 1 {
			t.Errorf("%s served %d times, want once", name, count[name])
		}
	}
}
