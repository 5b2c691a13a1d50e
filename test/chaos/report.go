package chaos

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// Report is what a run did and found. Violations must be empty.
type Report struct {
	mu sync.Mutex

	Seed     uint64 `json:"seed"`
	Duration string `json:"duration"`
	// Schedule is the schedule's digest: the same seed and duration, the
	// same digest.
	Schedule string `json:"schedule"`
	Nodes    int    `json:"initialNodes"`
	Services int    `json:"initialServices"`
	Replicas int    `json:"replicas"`
	// Cycles are the workload steps run.
	Cycles         int            `json:"cycles"`
	Workload       map[string]int `json:"workload"`
	WorkloadErrors map[string]int `json:"workloadErrors"`
	Faults         map[string]int `json:"faults"`
	// ReplicaExits counts Outrigger replicas that exited on their own
	// (a lost leader lease), each restarted as the kubelet would.
	ReplicaExits int `json:"replicaExits"`
	// ViolationsByInvariant has every invariant, 0 or not.
	ViolationsByInvariant map[string]int `json:"violationsByInvariant"`
	Violations            []Violation    `json:"violations"`
	Quiesced              bool           `json:"quiesced"`
	// QuiescenceSeconds is from the last fault lifted to every invariant
	// holding.
	QuiescenceSeconds float64 `json:"quiescenceSeconds"`
	// Ingress is how long new Services waited for their load balancer,
	// faults and all.
	Ingress Percentiles `json:"ingressSeconds"`
	Final   Final       `json:"final"`
	// Failover is set in a failover run (Config.Failover).
	Failover *Failover `json:"failover,omitempty"`
	// Shared, Hang and LostResponses are set when their setting is on.
	Shared        *SharedReport `json:"shared,omitempty"`
	Hang          *HangReport   `json:"hang,omitempty"`
	LostResponses *LostReport   `json:"lostResponses,omitempty"`
	Plugin        *PluginReport `json:"plugin,omitempty"`
	// SecondCluster is set in a run with a second cluster
	// (Config.SecondCluster).
	SecondCluster *SecondClusterReport `json:"secondCluster,omitempty"`
	WallSeconds   float64              `json:"wallSeconds"`
	WorkDir       string               `json:"workDir,omitempty"`

	ingressTimes []float64
	seen         map[string]bool
	// faultKinds and invariants are the run's, in report order.
	faultKinds, invariants  []string
	foreignTimes, hangTimes []float64
}

// SharedReport is what the second CCM of a shared run (Config.Shared) did.
type SharedReport struct {
	Replicas int    `json:"replicas"`
	Class    string `json:"class"`
	// CrossClassCleanups counts load balancers one CCM deleted that were
	// tagged with the other's class, of Services that no longer asked for
	// one (not violations: see CrossClassDelete).
	CrossClassCleanups int `json:"crossClassCleanups"`
	// Ingress is how long new Services of the second CCM's class waited
	// for their load balancer.
	Ingress Percentiles `json:"ingressSeconds"`
}

// SecondClusterReport is what the second cluster of a run did
// (Config.SecondCluster): both clusters are named kubernetes, and the
// cluster IDs tell their cloud objects apart.
type SecondClusterReport struct {
	Replicas int `json:"replicas"`
	// ClusterID is the second cluster's ID, FirstClusterID the first's.
	ClusterID      string `json:"clusterID"`
	FirstClusterID string `json:"firstClusterID"`
	// Nodes and Services are those at the start.
	Nodes    int `json:"initialNodes"`
	Services int `json:"initialServices"`
	// Cycles are its workload steps run.
	Cycles         int            `json:"cycles"`
	Workload       map[string]int `json:"workload"`
	WorkloadErrors map[string]int `json:"workloadErrors"`
	// Kills are the SIGKILLs of its replicas (KillSecondCluster).
	Kills int         `json:"kills"`
	Final SecondFinal `json:"final"`
}

// SecondFinal is the state the second cluster ended in: its load balancers
// and routes are those tagged with its ID.
type SecondFinal struct {
	Instances            int `json:"runningInstances"`
	Nodes                int `json:"nodes"`
	LoadBalancerServices int `json:"loadBalancerServices"`
	LoadBalancers        int `json:"cloudLoadBalancers"`
	Routes               int `json:"routes"`
}

// HangReport is what the object-hang faults (Config.Hang) measured.
type HangReport struct {
	Faults int `json:"faults"`
	// HungServices counts the Services whose load balancer's calls hung,
	// summed over the faults.
	HungServices int `json:"hungServices"`
	// Created counts the other Services of Outrigger's class created
	// during the faults; Converged those that got their ingress before the
	// fault lifted, Unjudged those without it that were created less than
	// hangGrace before the lift or deleted or changed meanwhile. The rest
	// are HangBlocked violations.
	Created   int `json:"created"`
	Converged int `json:"converged"`
	Unjudged  int `json:"unjudged"`
	// Ingress is how long the converged waited for their ingress.
	Ingress Percentiles `json:"ingressSeconds"`
}

// LostReport counts the API server answers the LostResponses faults lost.
type LostReport struct {
	// Lost are the writes whose answer was lost; Committed those of them
	// the API server had answered with a success.
	Lost      int `json:"lost"`
	Committed int `json:"committed"`
	// ByRequest counts the lost by method and resource ("PATCH nodes").
	ByRequest map[string]int `json:"byRequest"`
}

// PluginReport counts the plugin restarts (Config.Plugin).
type PluginReport struct {
	Restarts int `json:"restarts"`
	// MidCall counts the restarts whose kill came while the cloud was
	// answering a call (the rest found no call within
	// pluginInFlightWait).
	MidCall int `json:"midCall"`
}

// Percentiles summarize durations in seconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	Max   float64 `json:"max"`
}

// Final is the state the run ended in.
type Final struct {
	Instances            int `json:"runningInstances"`
	Nodes                int `json:"nodes"`
	LoadBalancerServices int `json:"loadBalancerServices"`
	LoadBalancers        int `json:"cloudLoadBalancers"`
	Routes               int `json:"routes"`
	// ForeignLoadBalancerServices are the LoadBalancer Services of the
	// second CCM's class, in a shared run.
	ForeignLoadBalancerServices int `json:"foreignLoadBalancerServices,omitempty"`
}

func newReport(cfg Config, s Schedule) *Report {
	r := &Report{
		Seed: cfg.Seed, Duration: cfg.Duration.String(), Schedule: s.Digest(),
		Nodes: cfg.Nodes, Services: cfg.Services, Replicas: cfg.Replicas,
		Workload: map[string]int{}, WorkloadErrors: map[string]int{}, Faults: map[string]int{},
		ViolationsByInvariant: map[string]int{}, Violations: []Violation{}, seen: map[string]bool{},
		faultKinds: append(slices.Clone(FaultKinds), cfg.extraFaults()...), invariants: cfg.invariants(),
	}
	for _, k := range r.faultKinds {
		r.Faults[k] = 0
	}
	for _, inv := range r.invariants {
		r.ViolationsByInvariant[inv] = 0
	}
	if cfg.Shared {
		r.Shared = &SharedReport{Replicas: cfg.SharedReplicas, Class: foreignClass}
	}
	if cfg.Hang {
		r.Hang = &HangReport{}
	}
	if cfg.LostResponses {
		r.LostResponses = &LostReport{}
	}
	if cfg.Plugin != "" {
		r.Plugin = &PluginReport{}
	}
	if cfg.SecondCluster {
		r.SecondCluster = &SecondClusterReport{Replicas: cfg.SecondReplicas, Workload: map[string]int{}, WorkloadErrors: map[string]int{}}
	}
	return r
}

// secondClusterUp records the second cluster's IDs and first objects.
func (r *Report) secondClusterUp(id, firstID string, nodes, services int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.SecondCluster.ClusterID, r.SecondCluster.FirstClusterID = id, firstID
	r.SecondCluster.Nodes, r.SecondCluster.Services = nodes, services
}

func (r *Report) secondWorkload(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.SecondCluster.Cycles++
	r.SecondCluster.Workload[kind]++
	if err != nil {
		r.SecondCluster.WorkloadErrors[kind]++
	}
}

func (r *Report) foreignIngress(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foreignTimes = append(r.foreignTimes, d.Seconds())
}

func (r *Report) crossClassCleanup() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Shared.CrossClassCleanups++
}

func (r *Report) hangStarted(hung int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Hang.Faults++
	r.Hang.HungServices += hung
}

func (r *Report) hangEnded(res hangResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Hang.Created += res.created
	r.Hang.Converged += len(res.ingress)
	r.Hang.Unjudged += res.unjudged
	for _, d := range res.ingress {
		r.hangTimes = append(r.hangTimes, d.Seconds())
	}
}

func (r *Report) lostResponses(lost, committed int, byRequest map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.LostResponses.Lost, r.LostResponses.Committed, r.LostResponses.ByRequest = lost, committed, byRequest
}

func (r *Report) pluginKill(midCall bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Plugin.Restarts++
	if midCall {
		r.Plugin.MidCall++
	}
}

func (r *Report) workload(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Cycles++
	r.Workload[kind]++
	if err != nil {
		r.WorkloadErrors[kind]++
	}
}

func (r *Report) fault(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Faults[kind]++
	if kind == KillSecondCluster {
		r.SecondCluster.Kills++
	}
}

func (r *Report) replicaExit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ReplicaExits++
}

func (r *Report) faultTotal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// violate records v once per invariant and object.
func (r *Report) violate(v Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := v.Invariant + " " + v.Object
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	r.Violations = append(r.Violations, v)
	r.ViolationsByInvariant[v.Invariant]++
}

func (r *Report) count(invariant string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ViolationsByInvariant[invariant]
}

func (r *Report) ingress(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ingressTimes = append(r.ingressTimes, d.Seconds())
}

func (r *Report) quiesced(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Quiesced, r.QuiescenceSeconds = true, round(d.Seconds())
}

func (r *Report) finish(wall time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.WallSeconds = round(wall.Seconds())
	r.Ingress = percentiles(r.ingressTimes)
	if r.Shared != nil {
		r.Shared.Ingress = percentiles(r.foreignTimes)
	}
	if r.Hang != nil {
		// Hundredths: without other faults, a load balancer takes tens of
		// milliseconds.
		r.Hang.Ingress = percentiles(r.hangTimes, round2)
	}
}

func percentiles(times []float64, rounding ...func(float64) float64) Percentiles {
	rnd := round
	if len(rounding) > 0 {
		rnd = rounding[0]
	}
	t := slices.Clone(times)
	sort.Float64s(t)
	n := len(t)
	if n == 0 {
		return Percentiles{}
	}
	return Percentiles{Count: n, P50: rnd(t[n/2]), P90: rnd(t[n*9/10]), Max: rnd(t[n-1])}
}

func round(s float64) float64 { return float64(int64(s*10+0.5)) / 10 }

// Table writes the report for a terminal.
func (r *Report) Table(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	fmt.Fprintf(tw, "duration\t%s (schedule %s)\n", r.Duration, r.Schedule)
	fmt.Fprintf(tw, "start\t%d nodes, %d Services, %d Outrigger replicas\n", r.Nodes, r.Services, r.Replicas)
	if r.Shared != nil {
		fmt.Fprintf(tw, "second CCM (shared cloud)\t%d replicas, class %s\n", r.Shared.Replicas, r.Shared.Class)
	}
	if c := r.SecondCluster; c != nil {
		fmt.Fprintf(tw, "second cluster (same name, one cloud)\t%d nodes, %d Services, %d Outrigger replicas; cluster-id %s (first %s)\n",
			c.Nodes, c.Services, c.Replicas, c.ClusterID, c.FirstClusterID)
	}
	fmt.Fprintf(tw, "workload cycles\t%d\n", r.Cycles)
	for _, k := range sortedKeys(r.Workload) {
		fmt.Fprintf(tw, "  %s\t%d (%d refused)\n", k, r.Workload[k], r.WorkloadErrors[k])
	}
	if r.Failover == nil {
		fmt.Fprintf(tw, "faults\t\n")
		for _, k := range r.faultKinds {
			fmt.Fprintf(tw, "  %s\t%d\n", k, r.Faults[k])
		}
	}
	fmt.Fprintf(tw, "outrigger exits (lease lost), restarted\t%d\n", r.ReplicaExits)
	fmt.Fprintf(tw, "invariant violations\t%d\n", len(r.Violations))
	for _, k := range r.invariants {
		fmt.Fprintf(tw, "  %s\t%d\n", k, r.ViolationsByInvariant[k])
	}
	if r.Quiesced {
		fmt.Fprintf(tw, "quiescence after last fault\t%.1fs\n", r.QuiescenceSeconds)
	} else {
		fmt.Fprintf(tw, "quiescence after last fault\tNOT REACHED\n")
	}
	fmt.Fprintf(tw, "time to ingress (new Services)\tp50 %.1fs, p90 %.1fs, max %.1fs (%d Services)\n", r.Ingress.P50, r.Ingress.P90, r.Ingress.Max, r.Ingress.Count)
	if s := r.Shared; s != nil {
		fmt.Fprintf(tw, "time to ingress (new Services, class %s)\tp50 %.1fs, p90 %.1fs, max %.1fs (%d Services)\n", s.Class, s.Ingress.P50, s.Ingress.P90, s.Ingress.Max, s.Ingress.Count)
		fmt.Fprintf(tw, "cross-class cleanups (Service no longer asking)\t%d\n", s.CrossClassCleanups)
	}
	if x := r.Hang; x != nil {
		fmt.Fprintf(tw, "object hangs\t%d faults, %d Services hung; %d others created during them: %d converged before the lift, %d too late to judge\n",
			x.Faults, x.HungServices, x.Created, x.Converged, x.Unjudged)
		fmt.Fprintf(tw, "  time to ingress during a hang\tp50 %.2fs, p90 %.2fs, max %.2fs (%d Services)\n", x.Ingress.P50, x.Ingress.P90, x.Ingress.Max, x.Ingress.Count)
	}
	if p := r.Plugin; p != nil {
		fmt.Fprintf(tw, "plugin restarts\t%d (%d of them mid-call)\n", p.Restarts, p.MidCall)
	}
	if l := r.LostResponses; l != nil {
		fmt.Fprintf(tw, "API answers lost\t%d (%d of committed writes)\n", l.Lost, l.Committed)
		for _, k := range sortedKeys(l.ByRequest) {
			fmt.Fprintf(tw, "  %s\t%d\n", k, l.ByRequest[k])
		}
	}
	foreign := ""
	if r.Shared != nil {
		foreign = fmt.Sprintf(" (+%d of class %s)", r.Final.ForeignLoadBalancerServices, r.Shared.Class)
	}
	fmt.Fprintf(tw, "final\t%d instances, %d nodes, %d LB Services%s, %d cloud LBs, %d routes\n",
		r.Final.Instances, r.Final.Nodes, r.Final.LoadBalancerServices, foreign, r.Final.LoadBalancers, r.Final.Routes)
	if c := r.SecondCluster; c != nil {
		refused := 0
		for _, n := range c.WorkloadErrors {
			refused += n
		}
		fmt.Fprintf(tw, "second cluster\t%d workload steps (%d refused), %d replica SIGKILLs\n", c.Cycles, refused, c.Kills)
		fmt.Fprintf(tw, "second cluster final\t%d instances, %d nodes, %d LB Services, %d cloud LBs, %d routes (tagged with its cluster-id)\n",
			c.Final.Instances, c.Final.Nodes, c.Final.LoadBalancerServices, c.Final.LoadBalancers, c.Final.Routes)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(tw, "failover: leader SIGKILLs measured\t%d (lease %gs, renew deadline %gs, retry period %gs; bound %gs)\n",
			f.Kills, f.LeaseDurationSeconds, f.RenewDeadlineSeconds, f.RetryPeriodSeconds, f.BoundSeconds)
		for _, row := range []struct {
			name string
			s    Spread
		}{{"  kill -> Lease held by another replica", f.LeaseMoved}, {"  kill -> new leader's first cloud call", f.Acting}} {
			fmt.Fprintf(tw, "%s\tmin %.2fs, median %.2fs, max %.2fs; %d of %d above %gs\n", row.name, row.s.Min, row.s.Median, row.s.Max, row.s.Over, row.s.Count, f.BoundSeconds)
		}
		fmt.Fprintf(tw, "  cloud calls by non-leaders\t%d\n", f.FollowerCalls)
		fmt.Fprintf(tw, "  failed failovers\t%d\n", len(f.Failures))
	}
	fmt.Fprintf(tw, "wall time\t%.1fs\n", r.WallSeconds)
	_ = tw.Flush()
	for _, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATION %s %s at %.1fs: %s\n", v.Invariant, v.Object, v.At, v.Detail)
	}
	if r.Failover != nil {
		for _, f := range r.Failover.Failures {
			fmt.Fprintf(w, "FAILOVER FAILED %s\n", f)
		}
	}
}

func sortedKeys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
