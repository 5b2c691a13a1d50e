// A Gateway's data plane traffic as the console shows it: what one pod's
// /metrics says (parsed with expfmt, the data plane's own exposition),
// summed over the pods read. Pure: the reading is in trafficread.go.

package console

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The data plane's series the console reads (internal/gateway/dataplane's
// Metrics): their names are its contract with the console.
const (
	dpRequests    = "outrigger_gateway_requests_total"
	dpDuration    = "outrigger_gateway_request_duration_seconds"
	dpUpstream    = "outrigger_gateway_upstream_errors_total"
	dpRetries     = "outrigger_gateway_retries_total"
	dpConnections = "outrigger_gateway_connections"
	dpLogDropped  = "outrigger_gateway_access_log_dropped_total"
)

// maxTrafficRoutes bounds each Gateway's route rows, as maxRoutesListed
// bounds its route list: the busiest are kept.
const maxTrafficRoutes = 50

// GatewayTraffic is what a Gateway's data plane pods counted, summed over
// the pods read. Counters are since each pod started; Rate is over the
// time since the previous read, for the pods read both times.
type GatewayTraffic struct {
	// Namespace is where its data plane pods were looked for.
	Namespace string `json:"namespace,omitempty"`
	// PodsFound counts the data plane pods found, PodsRead those whose
	// metrics were read; NotRead says why each of the others was not (at
	// most maxPodsPerGateway of them, NotReadMore counting the rest).
	PodsFound   int          `json:"podsFound"`
	PodsRead    int          `json:"podsRead"`
	NotRead     []PodNotRead `json:"notRead,omitempty"`
	NotReadMore int          `json:"notReadMore,omitempty"`
	// Reason says why no pod was looked at ("" when pods were listed).
	Reason string `json:"reason,omitempty"`
	// ReadAt is when the pods were read (zero: not yet); RateSeconds the
	// time since the read before, over which Rate is figured (0: no rate
	// yet).
	ReadAt      time.Time `json:"readAt,omitzero"`
	RateSeconds float64   `json:"rateSeconds,omitempty"`
	// Connections are the client connections open now, AccessLogDropped
	// the access log lines dropped, on the pods read.
	Connections      float64 `json:"connections"`
	AccessLogDropped float64 `json:"accessLogDropped"`
	// Listeners are the data plane's ports ("HTTP/80"), Routes the
	// HTTPRoutes and GRPCRoutes (namespace/name; "" for requests no route
	// took), busiest first, at most maxTrafficRoutes.
	Listeners []TrafficRow `json:"listeners"`
	Routes    []TrafficRow `json:"routes"`
}

// PodNotRead is a data plane pod whose metrics are not in the sums.
type PodNotRead struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// TrafficRow is one port's or route's figures.
type TrafficRow struct {
	Name string `json:"name"`
	// GatewayListeners are, on a port's row, the Gateway's listeners on
	// that port: the data plane counts ports, and HTTPS listeners with
	// different hostnames share one.
	GatewayListeners []string `json:"gatewayListeners,omitempty"`
	Requests         float64  `json:"requests"`
	// Codes are the requests by status class: 2xx, 3xx, 4xx, 5xx and
	// other.
	Codes map[string]float64 `json:"codes"`
	// Rate is requests per second since the previous read (nil: none).
	Rate           *float64 `json:"rate,omitempty"`
	UpstreamErrors float64  `json:"upstreamErrors"`
	// Retries are counted by route only.
	Retries float64 `json:"retries"`
	// P50 and P99 are latency quantiles in seconds from the histograms
	// (nil: no request observed), as precise as their buckets.
	P50 *float64 `json:"p50,omitempty"`
	P99 *float64 `json:"p99,omitempty"`
}

// podFigures are one pod's series, keyed by listener and route.
type podFigures struct {
	requests    map[rowKey]map[string]float64 // by status class
	buckets     map[rowKey]map[float64]float64
	upstream    map[rowKey]float64
	retries     map[string]float64 // by route
	connections float64
	logDropped  float64
}

type rowKey struct{ listener, route string }

// parsePodMetrics reads one pod's text exposition.
func parsePodMetrics(text []byte) (podFigures, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return podFigures{}, err
	}
	if families[dpRequests] == nil && families[dpConnections] == nil {
		// Something answered, but not a data plane.
		return podFigures{}, fmt.Errorf("no %s or %s series: not a Gateway data plane's metrics", dpRequests, dpConnections)
	}
	p := podFigures{requests: map[rowKey]map[string]float64{}, buckets: map[rowKey]map[float64]float64{},
		upstream: map[rowKey]float64{}, retries: map[string]float64{}}
	for _, m := range metricsOf(families[dpRequests]) {
		k := keyOf(m)
		if p.requests[k] == nil {
			p.requests[k] = map[string]float64{}
		}
		p.requests[k][codeClass(label(m, "code"))] += m.GetCounter().GetValue()
	}
	for _, m := range metricsOf(families[dpDuration]) {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		k := keyOf(m)
		if p.buckets[k] == nil {
			p.buckets[k] = map[float64]float64{}
		}
		for _, b := range h.GetBucket() {
			p.buckets[k][b.GetUpperBound()] += cmp.Or(b.GetCumulativeCountFloat(), float64(b.GetCumulativeCount()))
		}
		// The +Inf bucket is the sample count (the parser keeps it only
		// when the text has it).
		p.buckets[k][math.Inf(1)] = cmp.Or(h.GetSampleCountFloat(), float64(h.GetSampleCount()))
	}
	for _, m := range metricsOf(families[dpUpstream]) {
		p.upstream[keyOf(m)] += m.GetCounter().GetValue()
	}
	for _, m := range metricsOf(families[dpRetries]) {
		p.retries[label(m, "route")] += m.GetCounter().GetValue()
	}
	for _, m := range metricsOf(families[dpConnections]) {
		p.connections += m.GetGauge().GetValue()
	}
	for _, m := range metricsOf(families[dpLogDropped]) {
		p.logDropped += m.GetCounter().GetValue()
	}
	return p, nil
}

func metricsOf(f *dto.MetricFamily) []*dto.Metric {
	if f == nil {
		return nil
	}
	return f.GetMetric()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func keyOf(m *dto.Metric) rowKey {
	return rowKey{listener: label(m, "listener"), route: label(m, "route")}
}

// codeClass is a status code's class: "2xx" for 200.
func codeClass(code string) string {
	if len(code) == 3 && code[0] >= '1' && code[0] <= '5' {
		return code[:1] + "xx"
	}
	return "other"
}

// podRead is one pod read: its UID (which tells a pod from its
// replacement of the same name) and its figures.
type podRead struct {
	uid     string
	figures podFigures
}

// aggregateTraffic sums the pods read into t's rows; prev are the figures
// of the read rateSeconds before, by pod UID, for the rates (nil: none).
// listeners are the Gateway's, named on the rows of their ports.
func aggregateTraffic(t *GatewayTraffic, pods []podRead, prev map[string]podFigures, rateSeconds float64, listeners []Listener) {
	t.PodsRead = len(pods)
	t.Connections, t.AccessLogDropped = 0, 0
	byListener := map[string]*rowSums{}
	byRoute := map[string]*rowSums{}
	sums := func(m map[string]*rowSums, name string) *rowSums {
		if m[name] == nil {
			m[name] = &rowSums{codes: map[string]float64{}, buckets: map[float64]float64{}}
		}
		return m[name]
	}
	// Rates only over pods read both times: a pod new since, or
	// replaced, has no earlier count to subtract.
	rated := false
	for _, pod := range pods {
		f := pod.figures
		t.Connections += f.connections
		t.AccessLogDropped += f.logDropped
		before, hadBefore := prev[pod.uid]
		hadBefore = hadBefore && rateSeconds > 0
		rated = rated || hadBefore
		for k, codes := range f.requests {
			l, r := sums(byListener, k.listener), sums(byRoute, k.route)
			var n float64
			for class, v := range codes {
				l.codes[class] += v
				r.codes[class] += v
				n += v
			}
			l.requests += n
			r.requests += n
			if hadBefore {
				d := increase(n, total(before.requests[k]))
				l.increase += d
				r.increase += d
			}
		}
		for k, bs := range f.buckets {
			l, r := sums(byListener, k.listener), sums(byRoute, k.route)
			for le, v := range bs {
				l.buckets[le] += v
				r.buckets[le] += v
			}
		}
		for k, v := range f.upstream {
			sums(byListener, k.listener).upstream += v
			sums(byRoute, k.route).upstream += v
		}
		for route, v := range f.retries {
			sums(byRoute, route).retries += v
		}
	}
	if rated {
		t.RateSeconds = rateSeconds
	} else {
		t.RateSeconds = 0
	}
	t.Listeners = rowsOf(byListener, rated, rateSeconds)
	for i := range t.Listeners {
		t.Listeners[i].GatewayListeners = listenersOnPort(listeners, t.Listeners[i].Name)
	}
	slices.SortFunc(t.Listeners, func(a, b TrafficRow) int { return cmp.Compare(a.Name, b.Name) })
	t.Routes = rowsOf(byRoute, rated, rateSeconds)
	slices.SortFunc(t.Routes, func(a, b TrafficRow) int {
		return cmp.Or(cmp.Compare(b.Requests, a.Requests), cmp.Compare(a.Name, b.Name))
	})
	if len(t.Routes) > maxTrafficRoutes {
		t.Routes = t.Routes[:maxTrafficRoutes]
	}
}

// rowSums are one row's sums over the pods.
type rowSums struct {
	requests, increase, upstream, retries float64
	codes                                 map[string]float64
	buckets                               map[float64]float64
}

func rowsOf(m map[string]*rowSums, rated bool, seconds float64) []TrafficRow {
	rows := make([]TrafficRow, 0, len(m))
	for name, s := range m {
		row := TrafficRow{Name: name, Requests: s.requests, Codes: s.codes, UpstreamErrors: s.upstream, Retries: s.retries,
			P50: quantile(0.5, s.buckets), P99: quantile(0.99, s.buckets)}
		if rated {
			r := s.increase / seconds
			row.Rate = &r
		}
		rows = append(rows, row)
	}
	return rows
}

func total(codes map[string]float64) float64 {
	var n float64
	for _, v := range codes {
		n += v
	}
	return n
}

// increase is a counter's increase from before to now; a counter that
// went down was reset (its process restarted), so all of now is new.
func increase(now, before float64) float64 {
	if now < before {
		return now
	}
	return now - before
}

// listenersOnPort are the names of the Gateway's listeners whose
// protocol/port is port ("HTTP/80", as the data plane labels it).
func listenersOnPort(listeners []Listener, port string) []string {
	var out []string
	for _, l := range listeners {
		if strings.EqualFold(fmt.Sprintf("%s/%d", l.Protocol, l.Port), port) {
			out = append(out, l.Name)
		}
	}
	return out
}

// quantile is the q-quantile of a cumulative histogram (upper bound to
// count, +Inf included), interpolated linearly within its bucket as
// Prometheus's histogram_quantile does; nil when it counted nothing. A
// quantile in the +Inf bucket is the highest finite bound: all that is
// known is that it is above it.
func quantile(q float64, buckets map[float64]float64) *float64 {
	bounds := make([]float64, 0, len(buckets))
	for le := range buckets {
		bounds = append(bounds, le)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 || buckets[bounds[len(bounds)-1]] <= 0 {
		return nil
	}
	n := buckets[bounds[len(bounds)-1]]
	rank := q * n
	lower, below := 0.0, 0.0
	for i, le := range bounds {
		count := buckets[le]
		if count < rank {
			lower, below = le, count
			continue
		}
		var v float64
		switch {
		case math.IsInf(le, 1):
			v = lower
			if i == 0 {
				v = 0
			}
		case count == below:
			v = le
		default:
			v = lower + (le-lower)*(rank-below)/(count-below)
		}
		return &v
	}
	v := bounds[len(bounds)-1]
	return &v
}
