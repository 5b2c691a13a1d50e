package admission

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

func testMetrics() Metrics {
	counter := func(name string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name}, []string{"method"})
	}
	gauge := func(name string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name}, []string{"family"})
	}
	return Metrics{Held: counter("held"), Rejected: counter("rejected"), Throttles: counter("throttles"),
		ConcurrencyLimit: gauge("concurrency"), RateLimit: gauge("rate"), Slowdowns: counter("slowdowns")}
}

// A straggler grows a probing family's rate as an answer would: calls hung
// on many objects from the start would otherwise hold the family at its
// initial rate, and every other object behind them. Once the cloud has
// throttled the family, only answers grow it.
func TestStragglerGrowsOnlyAProbingRate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		throttled bool
		growth    rate.Limit
	}{
		{"probing", false, probeGrowth},
		{"after a throttle", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLimits(FamilyInstances, rate.Inf, 0, testMetrics())
			now := time.Now()
			if tc.throttled {
				for _, key := range []string{"a", "b", "c"} {
					f.Throttled(now, now, key, time.Second, 3)
				}
				now = now.Add(time.Second)
			}
			// The family uses its rate: a window's worth of calls sent.
			for range int(f.Rate()) {
				f.RecordSent(now)
			}
			before := f.Rate()
			f.straggled(now)
			if got := f.Rate(); got != before*tc.growth {
				t.Errorf("rate %v after a straggler, want %v", got, before*tc.growth)
			}
		})
	}
}
