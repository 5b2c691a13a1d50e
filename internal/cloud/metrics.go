package cloud

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The collectors are registered once per process with controller-runtime's
// registry, which the manager serves on /metrics. Each layer labels its
// series with its provider's name (an Outrigger may run several providers)
// and its tenant (tenant mode serves many clusters from one process; ""
// for a single cluster), and several layers of one provider and tenant in
// one process (tests, the benchmark) share their series.
var (
	callsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_total",
		Help: "Calls made to the cloud provider, by provider and method.",
	}, []string{"provider", "tenant", "method"})
	errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_call_errors_total",
		Help: "Cloud provider calls that returned an error (throttles and timeouts included), by provider and method.",
	}, []string{"provider", "tenant", "method"})
	throttlesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_throttled_total",
		Help: "Cloud provider calls the cloud answered by throttling, by provider and method.",
	}, []string{"provider", "tenant", "method"})
	timeoutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_call_timeouts_total",
		Help: "Cloud provider calls abandoned after the per-call timeout, by provider and method.",
	}, []string{"provider", "tenant", "method"})
	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "outrigger_cloud_call_duration_seconds",
		Help:    "Latency of cloud provider calls, by method, including time spent waiting for the rate limiter.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	}, []string{"provider", "tenant", "method"})
	inFlightRejectedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_in_flight_rejected_total",
		Help: "Calls refused without reaching the cloud because a call for the same object, abandoned after its timeout, was still running, by provider and method.",
	}, []string{"provider", "tenant", "method"})
	abandonedCalls = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_abandoned_calls",
		Help: "Calls abandoned after the per-call timeout (or their caller's cancellation) that the provider has not returned from yet, by method. Each holds its object's slot.",
	}, []string{"provider", "tenant", "method"})
	straggledTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_straggled_total",
		Help: "Calls that ran far past what their method family's answers take and gave their place in its concurrency back before their timeout (their object kept its slot), by provider and method.",
	}, []string{"provider", "tenant", "method"})
	keptAnswersTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_kept_answers_total",
		Help: "Answers of calls their caller had stopped waiting for (a straggler about one node) that answered the object's next call instead of a second cloud call, by provider and method.",
	}, []string{"provider", "tenant", "method"})
	heldTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_calls_held_total",
		Help: "Calls kept from the cloud because their object is held: the cloud throttled it and its retry hint has not passed, or its last calls timed out; by provider and method.",
	}, []string{"provider", "tenant", "method"})
	familyConcurrencyLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_family_concurrency_limit",
		Help: "Calls a method family may currently have in flight; adapts to the cloud's latency and throttling, by provider and family.",
	}, []string{"provider", "tenant", "family"})
	familyRateLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cloud_family_rate_limit",
		Help: "Calls per second a method family may currently make; adapts to the cloud's throttling, at most --cloud-qps when that is set.",
	}, []string{"provider", "tenant", "family"})
	familySlowdownsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cloud_family_slowdowns_total",
		Help: "Times a method family's rate was cut because the cloud throttled calls for several objects within a short window, by provider and family.",
	}, []string{"provider", "tenant", "family"})
)

func init() {
	metrics.Registry.MustRegister(callsTotal, errorsTotal, throttlesTotal, timeoutsTotal, callDuration,
		inFlightRejectedTotal, abandonedCalls, straggledTotal, keptAnswersTotal, heldTotal, familyConcurrencyLimit, familyRateLimit, familySlowdownsTotal)
}

// vecs are every collector above, for ForgetTenant.
var vecs = []interface {
	DeletePartialMatch(prometheus.Labels) int
}{callsTotal, errorsTotal, throttlesTotal, timeoutsTotal, callDuration, inFlightRejectedTotal, abandonedCalls,
	straggledTotal, keptAnswersTotal, heldTotal, familyConcurrencyLimit, familyRateLimit, familySlowdownsTotal}

// ForgetTenant deletes every series of tenant, once its layers are no
// longer used (the tenant stopped on this replica): a removed tenant, or
// one another replica took, leaves no stale gauge (a limit, abandoned calls)
// nor counters that would never move again. A tenant started again counts
// from zero, which rate() reads as a counter reset.
func ForgetTenant(tenant string) {
	for _, v := range vecs {
		v.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	}
}

// layerMetrics are the collectors curried with one layer's provider and
// tenant.
type layerMetrics struct {
	calls, errors, throttles, timeouts, rejected, held *prometheus.CounterVec
	straggled, keptAnswers                             *prometheus.CounterVec
	abandoned                                          *prometheus.GaugeVec
	duration                                           prometheus.ObserverVec
	concLimit, rateLimit                               *prometheus.GaugeVec
	slowdowns                                          *prometheus.CounterVec
}

func newLayerMetrics(provider, tenant string) *layerMetrics {
	l := prometheus.Labels{"provider": provider, "tenant": tenant}
	return &layerMetrics{
		calls:       callsTotal.MustCurryWith(l),
		errors:      errorsTotal.MustCurryWith(l),
		throttles:   throttlesTotal.MustCurryWith(l),
		timeouts:    timeoutsTotal.MustCurryWith(l),
		rejected:    inFlightRejectedTotal.MustCurryWith(l),
		held:        heldTotal.MustCurryWith(l),
		straggled:   straggledTotal.MustCurryWith(l),
		keptAnswers: keptAnswersTotal.MustCurryWith(l),
		abandoned:   abandonedCalls.MustCurryWith(l),
		duration:    callDuration.MustCurryWith(l),
		concLimit:   familyConcurrencyLimit.MustCurryWith(l),
		rateLimit:   familyRateLimit.MustCurryWith(l),
		slowdowns:   familySlowdownsTotal.MustCurryWith(l),
	}
}
