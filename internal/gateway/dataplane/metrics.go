package dataplane

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the data plane's own Prometheus metrics, served on its health
// port at /metrics. A data plane serves one Gateway, so Gateway is a label
// of the registry's scrape target, not of each series; listener is the
// port a request came in on (listenerName: "HTTP/80", "HTTPS/443"), route
// the HTTPRoute or GRPCRoute (namespace/name) that took it, "" for a
// request no route took. Both come from the programming, never from a
// request, so the series are as many as the Gateway's ports and routes.
type Metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	upstream    *prometheus.CounterVec
	retries     *prometheus.CounterVec
	applies     *prometheus.CounterVec
	connections prometheus.GaugeFunc
	evicted     prometheus.CounterFunc
	refused     prometheus.CounterFunc
	mirrors     prometheus.CounterFunc
	accessLogs  prometheus.CounterFunc
}

// NewMetrics registers the data plane's metrics of p on reg.
func NewMetrics(reg prometheus.Registerer, p *Proxy) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outrigger_gateway_requests_total",
			Help: "HTTP requests answered, by the listener (protocol/port) they came in on, the route that took them and the status code.",
		}, []string{"listener", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outrigger_gateway_request_duration_seconds",
			Help:    "Time from a request's headers to the end of its answer, by listener and route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"listener", "route"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outrigger_gateway_upstream_errors_total",
			Help: "Requests whose backend could not be reached or timed out, by listener and route.",
		}, []string{"listener", "route"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outrigger_gateway_retries_total",
			Help: "Requests sent to a backend again under their rule's retry stanza, by route and why: code (an answer with a retried status), connection (the backend could not be reached) or timeout (the attempt ran out the backendRequest timeout).",
		}, []string{"route", "reason"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outrigger_gateway_config_applies_total",
			Help: "Programmings applied (result ok) or refused (error).",
		}, []string{"result"}),
		connections: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outrigger_gateway_connections",
			Help: "Client connections open on the HTTP and TCP ports.",
		}, func() float64 { return float64(p.conns.count()) }),
		evicted: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outrigger_gateway_connections_evicted_total",
			Help: "Idle client connections closed to make room at the connection limit.",
		}, func() float64 { return float64(p.conns.evicted.Load()) }),
		refused: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outrigger_gateway_connections_refused_total",
			Help: "Client connections closed at once because every connection was busy at the limit.",
		}, func() float64 { return float64(p.conns.refused.Load()) }),
		mirrors: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outrigger_gateway_mirrors_dropped_total",
			Help: "Mirrored requests (RequestMirror) not sent because as many as the limit were in flight.",
		}, func() float64 { return float64(p.mirrors.dropped.Load()) }),
		accessLogs: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "outrigger_gateway_access_log_dropped_total",
			Help: "Access log lines dropped because the output (standard output) was slower than the requests.",
		}, func() float64 { return float64(p.access.dropped.Load()) }),
	}
	reg.MustRegister(m.requests, m.duration, m.upstream, m.retries, m.applies, m.connections, m.evicted, m.refused, m.mirrors, m.accessLogs)
	p.metrics = m
	return m
}

func (m *Metrics) observe(listener, route string, code int, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(listener, route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(listener, route).Observe(took.Seconds())
}

func (m *Metrics) retry(route, why string) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(route, why).Inc()
}

func (m *Metrics) upstreamError(listener, route string) {
	if m == nil {
		return
	}
	m.upstream.WithLabelValues(listener, route).Inc()
}

// listenerName is the listener label of a port: its protocol and number,
// "HTTP/80". Several Gateway listeners (HTTPS hostnames) may share a port,
// and the programming carries ports, not listener names.
func listenerName(protocol Protocol, port int32) string {
	return string(protocol) + "/" + strconv.Itoa(int(port))
}

// Applied counts a programming's outcome.
func (m *Metrics) Applied(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.applies.WithLabelValues(result).Inc()
}
