package cloud

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The collectors are registered once per process with controller-runtime's
// registry, which the manager serves on /metrics; several layers in one
// process (tests, the benchmark) share them, as the label is the method.
var (
	callsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_total",
		Help: "Calls made to the cloud provider, by method.",
	}, []string{"method"})
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_call_errors_total",
		Help: "Cloud provider calls that returned an error (throttles and timeouts included), by method.",
	}, []string{"method"})
	throttlesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_throttled_total",
		Help: "Cloud provider calls the cloud answered by throttling, by method.",
	}, []string{"method"})
	timeoutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_call_timeouts_total",
		Help: "Cloud provider calls abandoned after the per-call timeout, by method.",
	}, []string{"method"})
	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "outrigger_cloud_call_duration_seconds",
		Help:    "Latency of cloud provider calls, by method, including time spent waiting for the rate limiter.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"method"})
)

func init() {
	metrics.Registry.MustRegister(callsTotal, errorsTotal, throttlesTotal, timeoutsTotal, callDuration)
}
