package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CCM variants, in the order each size runs them.
const (
	outrigger        = "outrigger"
	outriggerPlugin  = "outrigger-plugin"
	upstreamTuned    = "upstream-tuned"
	upstreamDefaults = "upstream-defaults"
)

var ccmOrder = []string{outrigger, outriggerPlugin, upstreamTuned, upstreamDefaults}

// ccmNames name the variants in tables and pictures.
var ccmNames = map[string]string{
	outrigger:        "Outrigger, defaults",
	outriggerPlugin:  "Outrigger, provider as a plugin",
	upstreamTuned:    "upstream, tuned",
	upstreamDefaults: "upstream, defaults",
}

// Results is one run of the benchmark: what the results file holds.
type Results struct {
	Command string `json:"command"`
	Commit  string `json:"commit"`
	Setup   Setup  `json:"setup"`
	// References are the API server's write limit, one per node count.
	References []Reference `json:"references"`
	// ServiceReferences are the API server's pace creating LoadBalancer
	// Services, one per Service count.
	ServiceReferences []ServiceReference `json:"serviceReferences,omitempty"`
	Rows              []Row              `json:"rows"`
	Fits              []Fit              `json:"fits"`
}

// Setup is what every row shares.
type Setup struct {
	CloudLatency  string   `json:"cloudLatency"`
	Refresh       string   `json:"refresh"`
	IdlePeriods   int      `json:"idlePeriods"`
	Bound         string   `json:"bound"`
	Churn         int      `json:"churn"`
	APIServerArgs []string `json:"apiServerArgs"`
	Etcd          []string `json:"etcd"`
	UpstreamTuned []string `json:"upstreamTuned"`
}

// Reference is the API server's write limit for a node count: the two
// writes that initialize each node, made by the benchmark with no CCM.
type Reference struct {
	Nodes   int     `json:"nodes"`
	Seconds float64 `json:"seconds"`
	Writes  int64   `json:"writes"`
}

// ServiceReference is the time the API server takes to create a number of
// LoadBalancer Services, made by the benchmark with no nodes and no CCM:
// the pace a load balancer phase cannot beat. Creating a Service costs the
// API server more the more Services exist (its ClusterIP allocator counts
// every allocated address after each allocation, for its metrics), so the
// pace falls as the count grows.
type ServiceReference struct {
	Services int     `json:"services"`
	Seconds  float64 `json:"seconds"`
	// WithWritesSeconds is the same with the two writes upstream's service
	// controller makes for each new load balancer, made by the benchmark as
	// each Service appears: the floor of a load balancer phase on this API
	// server.
	WithWritesSeconds float64 `json:"withWritesSeconds,omitempty"`
}

// Row is one CCM on one workload.
type Row struct {
	CloudLimit float64  `json:"cloudLimit"`
	Nodes      int      `json:"nodes"`
	Services   int      `json:"services"`
	CCM        string   `json:"ccm"`
	Flags      []string `json:"flags"`
	// NodeInit is from the CCM's start until every node is initialized.
	NodeInit Phase `json:"nodeInit"`
	// Provision is from the first Service create until every Service has
	// an ingress address.
	Provision Phase `json:"provision"`
	// Idle is the cost of a quiet cluster, per refresh period.
	Idle *Idle `json:"idle,omitempty"`
	// Churn is from the first leave or join until every joining node is
	// initialized and every load balancer's backends are the nodes.
	Churn      Phase `json:"churn"`
	ChurnNodes int   `json:"churnNodes"`
	// Restart is from a new process's start, after the churn, until it has
	// ensured every load balancer again; RestartFirstCall is its first
	// cloud call (leader elected, caches synced), in seconds.
	Restart          Phase   `json:"restart"`
	RestartFirstCall float64 `json:"restartFirstCall,omitempty"`
	PeakRSSMiB       float64 `json:"peakRSSMiB"`
	CPUSeconds       float64 `json:"cpuSeconds"`
	// Error says why a row stopped other than at the bound.
	Error string `json:"error,omitempty"`
}

// Phase is one timed part of a row.
type Phase struct {
	Ran bool `json:"ran"`
	// Finished is false when the bound ended the phase: Seconds is then
	// the bound and Done what was reached.
	Finished bool    `json:"finished"`
	Seconds  float64 `json:"seconds"`
	Done     int     `json:"done"`
	Want     int     `json:"want"`
	// Calls and Throttled are the cloud calls of the phase (the load
	// balancer phase: its load balancer calls only; node refreshes that
	// fall in it are in ByOp), 429s included.
	Calls     int64 `json:"calls"`
	Throttled int64 `json:"throttled"`
	// ByOp and ThrottledByOp are every call of the phase, by operation.
	ByOp          map[string]int64 `json:"byOp,omitempty"`
	ThrottledByOp map[string]int64 `json:"throttledByOp,omitempty"`
	// Writes are the API server's mutating requests but the benchmark's
	// own and notCCMWrites.
	Writes int64 `json:"writes"`
	// BackendWrites are the load balancer backend updates the cloud
	// accepted (EnsureLoadBalancer and UpdateLoadBalancer).
	BackendWrites int64 `json:"backendWrites"`
}

// Idle is a quiet cluster's cost per refresh period.
type Idle struct {
	CallsPerPeriod  float64 `json:"callsPerPeriod"`
	WritesPerPeriod float64 `json:"writesPerPeriod"`
	// CPUPerPeriod is the CCM's CPU seconds per period.
	CPUPerPeriod float64 `json:"cpuPerPeriod"`
}

// finished reports whether every phase of the row finished.
func (r Row) finished() bool {
	return r.Error == "" && r.NodeInit.Finished && r.Provision.Finished && r.Churn.Finished
}

// reference is the write limit measured for n nodes, if any.
func (res *Results) reference(n int) (Reference, bool) {
	for _, ref := range res.References {
		if ref.Nodes == n {
			return ref, true
		}
	}
	return Reference{}, false
}

// serviceReference is the creation time measured for m Services, if any.
func (res *Results) serviceReference(m int) (ServiceReference, bool) {
	for _, ref := range res.ServiceReferences {
		if ref.Services == m {
			return ref, true
		}
	}
	return ServiceReference{}, false
}

// limitName names a cloud limit.
func limitName(l float64) string {
	if l <= 0 {
		return "none"
	}
	return fmt.Sprintf("%s calls/s", num(l))
}

// num formats a count with thousands separators, and a fraction with one
// decimal unless it is whole.
func num(v float64) string {
	if v != math.Trunc(v) || math.Abs(v) >= 1e15 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return group(strconv.FormatInt(int64(v), 10))
}

// group puts thousands separators into an integer's digits.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// dec1 formats v with one decimal and thousands separators.
func dec1(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	i := strings.IndexByte(s, '.')
	return group(s[:i]) + s[i:]
}

func count(v int64) string { return group(strconv.FormatInt(v, 10)) }

// seconds formats a phase's time: "> bound (done of want)" when it did not
// finish, "not reached" when it did not run.
func (p Phase) seconds() string {
	switch {
	case !p.Ran:
		return "not reached"
	case !p.Finished:
		return fmt.Sprintf("> %.0f (%s of %s)", p.Seconds, count(int64(p.Done)), count(int64(p.Want)))
	default:
		return fmt.Sprintf("%.1f", p.Seconds)
	}
}

// per formats v per object, or nothing when the phase did not run.
func (p Phase) per(v int64, objects int) string {
	if !p.Ran || objects == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", float64(v)/float64(objects))
}

// Markdown renders the results as tables: the API server's write limit,
// the rows, and the fitted exponents.
func (res *Results) Markdown() string {
	var b strings.Builder
	b.WriteString("| nodes | no CCM: the API server's write limit, seconds for two writes per node | writes per second |\n")
	b.WriteString("| ---: | ---: | ---: |\n")
	for _, ref := range res.References {
		fmt.Fprintf(&b, "| %s | %.1f | %s |\n", count(int64(ref.Nodes)), ref.Seconds, count(int64(math.Round(float64(ref.Writes)/ref.Seconds))))
	}
	b.WriteString("\n")
	if len(res.ServiceReferences) > 0 {
		b.WriteString("| Services | no CCM: seconds for the API server to create them | Services per second | no CCM: seconds to create them and make a CCM's two writes for each (finalizer, status) |\n")
		b.WriteString("| ---: | ---: | ---: | ---: |\n")
		for _, ref := range res.ServiceReferences {
			withWrites := ""
			if ref.WithWritesSeconds > 0 {
				withWrites = fmt.Sprintf("%.1f", ref.WithWritesSeconds)
			}
			fmt.Fprintf(&b, "| %s | %.1f | %s | %s |\n", count(int64(ref.Services)), ref.Seconds, count(int64(math.Round(float64(ref.Services)/ref.Seconds))), withWrites)
		}
		b.WriteString("\n")
	}
	b.WriteString("| cloud limit | nodes | Services | CCM | s to all nodes initialized | x write limit | s to all load balancers provisioned | x creation time | cloud calls: nodes / LBs | 429s: nodes / LBs | API writes per node | API writes per LB | idle cloud calls per refresh period | idle API writes per refresh period | idle CPU s per refresh period | churn: s to converge | churn: backend updates per LB | churn: cloud calls / 429s | restart: s to first call / every LB ensured | peak RSS (MiB) | CPU s |\n")
	b.WriteString("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range res.Rows {
		ratio := ""
		if ref, ok := res.reference(r.Nodes); ok && r.NodeInit.Ran && ref.Seconds > 0 {
			ratio = fmt.Sprintf("%.2f", r.NodeInit.Seconds/ref.Seconds)
			if !r.NodeInit.Finished {
				ratio = "> " + ratio
			}
		}
		svcRatio := ""
		if ref, ok := res.serviceReference(r.Services); ok && r.Provision.Ran && ref.Seconds > 0 {
			svcRatio = fmt.Sprintf("%.2f", r.Provision.Seconds/ref.Seconds)
			if !r.Provision.Finished {
				svcRatio = "> " + svcRatio
			}
		}
		name := ccmNames[r.CCM]
		if r.CCM == outrigger {
			name = "**" + name + "**"
		}
		if r.Error != "" {
			name += " (" + r.Error + ")"
		}
		idleCalls, idleWrites, idleCPU := "not reached", "", ""
		if r.Idle != nil {
			idleCalls, idleWrites, idleCPU = dec1(r.Idle.CallsPerPeriod), dec1(r.Idle.WritesPerPeriod), fmt.Sprintf("%.2f", r.Idle.CPUPerPeriod)
		}
		pair := func(a, b Phase, f func(Phase) int64) string {
			s := count(f(a))
			if b.Ran {
				s += " / " + count(f(b))
			}
			return s
		}
		churnCalls := ""
		if r.Churn.Ran {
			churnCalls = count(r.Churn.Calls) + " / " + count(r.Churn.Throttled)
		}
		restart := r.Restart.seconds()
		if r.Restart.Ran {
			restart = fmt.Sprintf("%.1f / %s", r.RestartFirstCall, restart)
		}
		rss, cpu := "", ""
		if r.PeakRSSMiB > 0 {
			rss, cpu = fmt.Sprintf("%.0f", r.PeakRSSMiB), fmt.Sprintf("%.1f", r.CPUSeconds)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			limitName(r.CloudLimit), count(int64(r.Nodes)), count(int64(r.Services)), name,
			r.NodeInit.seconds(), ratio, r.Provision.seconds(), svcRatio,
			pair(r.NodeInit, r.Provision, func(p Phase) int64 { return p.Calls }),
			pair(r.NodeInit, r.Provision, func(p Phase) int64 { return p.Throttled }),
			r.NodeInit.per(r.NodeInit.Writes, r.Nodes), r.Provision.per(r.Provision.Writes, r.Services),
			idleCalls, idleWrites, idleCPU,
			r.Churn.seconds(), r.Churn.per(r.Churn.BackendWrites, r.Services), churnCalls, restart, rss, cpu)
	}
	if len(res.Fits) > 0 {
		b.WriteString("\n")
		b.WriteString("| CCM | cloud limit | Services | time to all nodes initialized ~ nodes^k: k | node counts fitted | peak RSS ~ nodes^k: k | node counts fitted | idle CPU per period ~ nodes^k: k | node counts fitted |\n")
		b.WriteString("| --- | --- | ---: | ---: | --- | ---: | --- | ---: | --- |\n")
		for _, f := range res.Fits {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", ccmNames[f.CCM], limitName(f.CloudLimit), count(int64(f.Services)),
				exponent(f.TimeExponent, f.TimeNodes), joinInts(f.TimeNodes), exponent(f.RSSExponent, f.RSSNodes), joinInts(f.RSSNodes),
				exponent(f.IdleCPUExponent, f.IdleCPUNodes), joinInts(f.IdleCPUNodes))
		}
	}
	return b.String()
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = count(int64(x))
	}
	return strings.Join(s, ", ")
}

// exponent formats a fitted exponent; fewer than two node counts fit none.
func exponent(k float64, nodes []int) string {
	if len(nodes) < 2 {
		return "no fit"
	}
	return fmt.Sprintf("%.2f", k)
}
