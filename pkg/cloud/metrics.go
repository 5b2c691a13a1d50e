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
	inFlightRejectedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_in_flight_rejected_total",
		Help: "Calls refused without reaching the cloud because a call for the same object, abandoned after its timeout, was still running, by method.",
	}, []string{"method"})
	abandonedCalls = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_abandoned_calls",
		Help: "Calls abandoned after the per-call timeout (or their caller's cancellation) that the provider has not returned from yet, by method. Each holds its object's slot.",
	}, []string{"method"})
	heldTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_held_total",
		Help: "Calls kept from the cloud because it throttled their object and its retry hint has not passed yet, by method.",
	}, []string{"method"})
	familyConcurrencyLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_family_concurrency_limit",
		Help: "Calls a method family may currently have in flight; adapts to the cloud's latency and throttling, by family.",
	}, []string{"family"})
	familyRateLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_family_rate_limit",
		Help: "Calls per second a method family may currently make; adapts to the cloud's throttling, at most --cloud-qps when that is set.",
	}, []string{"family"})
	familySlowdownsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_family_slowdowns_total",
		Help: "Times a method family's rate was cut because the cloud throttled calls for several objects within a short window, by family.",
	}, []string{"family"})
)

func init() {
	metrics.Registry.MustRegister(callsTotal, errorsTotal, throttlesTotal, timeoutsTotal, callDuration,
		inFlightRejectedTotal, abandonedCalls, heldTotal, familyConcurrencyLimit, familyRateLimit, familySlowdownsTotal)
}
