package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// Upstream's default leader-election timings (k8s.io/component-base), which
// the failover figure is for; the shipped manifests shorten the retry
// period, the other chaos runs shorten all three.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// The Lease the replicas elect their leader with: upstream's, as Outrigger
// uses by default.
const (
	leaseNamespace = "kube-system"
	leaseName      = "cloud-controller-manager"
)

// failoverWait bounds each wait of a kill (for a leader, for the Lease to
// move, for the new leader to act): far above any lease duration, so only a
// failover that does not happen ends it.
const failoverWait = 2 * time.Minute

// A leader runs for failoverLeadMin plus up to failoverLeadSpread (seeded)
// before it is killed.
const (
	failoverLeadMin    = 3 * time.Second
	failoverLeadSpread = 5 * time.Second
)

// failoverPoll is how often the Lease and the cloud's call log are read
// while waiting on them. It does not limit the precision of the figures:
// they come from the Lease's acquireTime and the call log's timestamps.
const failoverPoll = 200 * time.Millisecond

// Failover is what the leader kills of a failover run measured.
type Failover struct {
	// Lease timings the replicas ran with, in seconds.
	LeaseDurationSeconds float64 `json:"leaseDurationSeconds"`
	RenewDeadlineSeconds float64 `json:"renewDeadlineSeconds"`
	RetryPeriodSeconds   float64 `json:"retryPeriodSeconds"`
	// BoundSeconds is the lease duration plus one retry period: the time
	// within which a new leader should act.
	BoundSeconds float64 `json:"boundSeconds"`
	Kills        int     `json:"kills"`
	// LeaseMoved is from the SIGKILL of the leader to another replica
	// acquiring the Lease (its acquireTime).
	LeaseMoved Spread `json:"leaseMovedSeconds"`
	// Acting is from the SIGKILL to the first cloud call of the new
	// leader (the start of the call, as the sim cloud logged it).
	Acting Spread `json:"actingSeconds"`
	// FollowerCalls counts cloud calls made, between a leader's
	// acquisition and its kill, by replicas that were not the leader. The
	// leader is recognised by its calls, so this must be 0.
	FollowerCalls int            `json:"followerCalls"`
	Samples       []FailoverKill `json:"samples"`
	Failures      []string       `json:"failures"`
	leaseTimes    []time.Duration
	actTimes      []time.Duration
}

// Spread summarizes durations in seconds; Over counts those above the
// bound.
type Spread struct {
	Count  int     `json:"count"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Over   int     `json:"overBound"`
}

// FailoverKill is one SIGKILL of the leader.
type FailoverKill struct {
	// At is the offset of the kill in the run, in seconds.
	At float64 `json:"at"`
	// Killed and NewLeader are the replicas' sim-cloud caller names
	// (replica index and incarnation).
	Killed     string  `json:"killed"`
	NewLeader  string  `json:"newLeader"`
	LeaseMoved float64 `json:"leaseMovedSeconds"`
	Acting     float64 `json:"actingSeconds"`
}

func newFailover(cfg Config) *Failover {
	return &Failover{
		LeaseDurationSeconds: cfg.LeaseDuration.Seconds(), RenewDeadlineSeconds: cfg.RenewDeadline.Seconds(),
		RetryPeriodSeconds: cfg.RetryPeriod.Seconds(), BoundSeconds: (cfg.LeaseDuration + cfg.RetryPeriod).Seconds(),
		Samples: []FailoverKill{}, Failures: []string{},
	}
}

func (r *Report) failoverKill(k FailoverKill, lease, act time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.Failover
	f.Kills++
	f.Samples = append(f.Samples, k)
	f.leaseTimes = append(f.leaseTimes, lease)
	f.actTimes = append(f.actTimes, act)
	bound := time.Duration(f.BoundSeconds * float64(time.Second))
	f.LeaseMoved = spread(f.leaseTimes, bound)
	f.Acting = spread(f.actTimes, bound)
}

func (r *Report) failoverFailure(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Failover.Failures = append(r.Failover.Failures, msg)
}

func (r *Report) followerCalls(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Failover.FollowerCalls += n
}

func spread(ds []time.Duration, bound time.Duration) Spread {
	t := slices.Clone(ds)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	n := len(t)
	if n == 0 {
		return Spread{}
	}
	median := t[n/2]
	if n%2 == 0 {
		median = (t[n/2-1] + t[n/2]) / 2
	}
	s := Spread{Count: n, Min: round2(t[0].Seconds()), Median: round2(median.Seconds()), Max: round2(t[n-1].Seconds())}
	for _, d := range t {
		if d > bound {
			s.Over++
		}
	}
	return s
}

func round2(s float64) float64 { return float64(int64(s*100+0.5)) / 100 }

// leader is the replica holding the Lease.
type leader struct {
	identity string // the Lease's holderIdentity
	acquired time.Time
	index    int
	caller   string
}

// runFailover SIGKILLs the leader cfg.Failover times while the workload
// runs. Each time it finds the leader (the Lease's holder, recognised by its
// cloud calls), kills it and starts it again as the kubelet would, then
// waits for the Lease to move to another replica and for that replica's
// first cloud call. An error means the environment could not be put back.
func (h *harness) runFailover(ctx context.Context) error {
	// The leader runs for a seeded while before each kill, so kills fall
	// at every phase of its renewals, and the first leader gets to work.
	rng := rand.New(rand.NewPCG(h.cfg.Seed, h.cfg.Seed^0x5deece66d))
	// A leader that loses the Lease before its kill is not killed; the
	// attempts are bounded all the same.
	for kills, attempt := 0, 0; kills < h.cfg.Failover && attempt < 3*h.cfg.Failover; attempt++ {
		lead := failoverLeadMin + time.Duration(rng.Int64N(int64(failoverLeadSpread))).Truncate(100*time.Millisecond)
		old, err := h.awaitLeader(ctx, "")
		if err != nil {
			h.report.failoverFailure(err.Error())
			h.logf("failover: %v", err)
			continue
		}
		if !h.at(ctx, h.since()+lead) {
			return nil
		}
		if !h.isLeader(ctx, old) {
			// It lost the Lease on its own meanwhile: find the new one.
			h.logf("failover: %s no longer holds the Lease; looking again", old.caller)
			continue
		}
		h.countFollowerCalls(old, time.Now())
		at := h.since()
		killed := time.Now()
		kills++
		h.logf("failover: SIGKILL leader %s (%s)", old.caller, old.identity)
		h.stopReplica(old.index, syscall.SIGKILL)
		if err := h.startReplica(old.index); err != nil {
			return fmt.Errorf("restarting replica %d: %w", old.index, err)
		}
		h.mu.Lock()
		h.lastLift = time.Now()
		h.mu.Unlock()
		next, err := h.awaitLeader(ctx, old.identity)
		if err != nil {
			h.report.failoverFailure(fmt.Sprintf("after killing %s at %.1fs: %v", old.caller, at.Seconds(), err))
			h.logf("failover: %v", err)
			continue
		}
		first, ok := h.firstCall(next.caller, killed)
		if !ok {
			return errors.New("failover: the new leader's first call left the call log")
		}
		lease, act := next.acquired.Sub(killed), first.Sub(killed)
		h.report.failoverKill(FailoverKill{At: round(at.Seconds()), Killed: old.caller, NewLeader: next.caller,
			LeaseMoved: round2(lease.Seconds()), Acting: round2(act.Seconds())}, lease, act)
		h.logf("failover: %s leads after %.2fs, first cloud call after %.2fs", next.caller, lease.Seconds(), act.Seconds())
	}
	return nil
}

// awaitLeader waits until the Lease is held by someone other than notHolder
// and a running replica has called the cloud since that holder acquired
// it: that replica is the leader, and acting.
func (h *harness) awaitLeader(ctx context.Context, notHolder string) (leader, error) {
	ctx, cancel := context.WithTimeout(ctx, failoverWait)
	defer cancel()
	t := time.NewTicker(failoverPoll)
	defer t.Stop()
	for {
		lease, err := h.client.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err == nil {
			if l, ok := h.leaderOf(lease, notHolder); ok {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			if notHolder != "" {
				return leader{}, fmt.Errorf("no replica other than %s took the Lease and acted within %v", notHolder, failoverWait)
			}
			return leader{}, fmt.Errorf("no leader acting within %v", failoverWait)
		case <-t.C:
		}
	}
}

func (h *harness) leaderOf(lease *coordinationv1.Lease, notHolder string) (leader, bool) {
	s := lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity == "" || *s.HolderIdentity == notHolder || s.AcquireTime == nil {
		return leader{}, false
	}
	acquired := s.AcquireTime.Time
	callers := h.runningCallers()
	for _, c := range h.cloud.CallLog() {
		if i, ok := callers[c.Caller]; ok && !c.Start.Before(acquired) {
			return leader{identity: *s.HolderIdentity, acquired: acquired, index: i, caller: c.Caller}, true
		}
	}
	return leader{}, false
}

// isLeader tells whether l still holds the Lease.
func (h *harness) isLeader(ctx context.Context, l leader) bool {
	lease, err := h.client.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == l.identity
}

// runningCallers maps the caller names of the running replicas to their
// index.
func (h *harness) runningCallers() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for i, r := range h.replicas {
		if r != nil {
			out[r.caller] = i
		}
	}
	return out
}

// firstCall is when caller started its first cloud call since from.
func (h *harness) firstCall(caller string, from time.Time) (time.Time, bool) {
	var first time.Time
	for _, c := range h.cloud.CallLog() {
		if c.Caller == caller && !c.Start.Before(from) && (first.IsZero() || c.Start.Before(first)) {
			first = c.Start
		}
	}
	return first, !first.IsZero()
}

// countFollowerCalls records cloud calls by replicas other than l between
// l's acquisition and until: there should be none, or "the replica that
// calls the cloud" would not identify the leader.
func (h *harness) countFollowerCalls(l leader, until time.Time) {
	n := 0
	for _, c := range h.cloud.CallLog() {
		if c.Caller != l.caller && c.Caller != "" && !c.Start.Before(l.acquired) && c.Start.Before(until) && isReplica(c) {
			n++
		}
	}
	if n > 0 {
		h.logf("failover: %d cloud calls by non-leaders while %s led", n, l.caller)
	}
	h.report.followerCalls(n)
}

// isReplica tells a replica's call from the harness's own (the kubelet
// simulator and the workload call the cloud without a caller name).
func isReplica(c simcloud.LoggedCall) bool {
	return strings.HasPrefix(c.Caller, callerPrefix)
}

// callerPrefix starts the caller name of every replica.
const callerPrefix = "outrigger-"
