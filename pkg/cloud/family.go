package cloud

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Family is a group of cloud methods that a cloud usually rate-limits
// together (one API, one quota): when it throttles many objects' calls of a
// family, the layer slows that family down and leaves the others alone.
type Family string

// The method families.
const (
	FamilyInstances     Family = "instances"
	FamilyLoadBalancers Family = "loadbalancers"
	FamilyRoutes        Family = "routes"
	FamilyNodeCIDRs     Family = "nodecidrs"
)

var families = []Family{FamilyInstances, FamilyLoadBalancers, FamilyRoutes, FamilyNodeCIDRs}

// minRate is the slowest a family adapts down to, in calls per second.
const minRate = 0.5

// initialRate is the rate a family without --cloud-qps starts at, in calls
// per second, before it has learnt what the cloud allows.
const initialRate = 100

// decreaseCooldown is how long after a decrease throttles do not count
// towards the next one: a cloud's own token bucket is still refilling from
// the burst that caused the first, and its refusals meanwhile say nothing
// about the new rate.
const decreaseCooldown = 250 * time.Millisecond

// rateTick is how often a family's rate may grow once it has been
// throttled (additive increase).
const rateTick = 100 * time.Millisecond

// probeTick is how often a probing family's rate may grow: the probe's
// doubling every 50 ms takes a family from 100 to 3,200 calls a second in a
// quarter of a second, so that a cloud without a limit does not wait on it.
const probeTick = 50 * time.Millisecond

// probeGrowth is the factor per probeTick by which a family's rate grows
// until the cloud first throttles it: doubling every tick, as TCP's slow
// start doubles every round trip. The rate only grows while the family uses
// it, and the family's concurrency (doubling every round trip of the cloud)
// bounds what it sends, so against a slow cloud the probe is as fast as its
// answers and no faster; against a fast one it reaches thousands of calls a
// second within a quarter of a second.
const probeGrowth = 2.0

// usageWindow is how far back a family's use of its rate is measured
// before the rate grows: about ten calls' worth, within [probeTick, 1s], so
// that a probe's rate grows from its first calls and a slow family's use
// is not read from one call.
func usageWindow(r rate.Limit) time.Duration {
	if r <= 0 {
		return time.Second
	}
	return min(time.Second, max(probeTick, time.Duration(float64(10*time.Second)/float64(r))))
}

// family adapts one method family's rate to what the cloud accepts: halved
// when the cloud throttles several objects' calls in a short window
// (multiplicative decrease), raised a little on every accepted call
// (additive increase) back to --cloud-qps. At the ceiling its limiter holds
// calls no more than the layer's own --cloud-qps limiter does.
type family struct {
	name    Family
	m       *layerMetrics
	limiter *rate.Limiter
	// conc adapts how many calls the family has in flight.
	conc *concurrency
	// decreases counts the rate's decreases: a call that waited for the
	// rate across one asks again.
	decreases atomic.Uint64
	// first lets foreground calls go ahead of background ones.
	first *precedence
	// abandoned counts the family's calls given up after their timeout
	// whose provider has not returned yet (each holds only its object's
	// slot, not the family's concurrency).
	abandoned atomic.Int64
	ceiling   rate.Limit
	burst     int
	// slowStart: no throttle seen yet, the rate grows by a factor per
	// tick rather than by a step.
	slowStart  bool
	lastGrowth time.Time

	mu sync.Mutex
	// lastDecrease is when the rate was last halved: calls sent before it
	// went out at the old rate, so their throttles do not count again.
	lastDecrease time.Time
	throttles    []throttle
	// sent counts the family's calls, accepted those the cloud answered
	// without throttling, both over the last second.
	sent, accepted window
}

type throttle struct {
	at  time.Time
	key string
}

func newFamily(name Family, ceiling rate.Limit, burst int, m *layerMetrics) *family {
	start := ceiling
	if ceiling == rate.Inf {
		// No ceiling: probe from a modest rate up, rather than send
		// everything at once and learn the cloud's limit from a burst
		// of refusals.
		start = initialRate
		burst = 0
	}
	f := &family{name: name, ceiling: ceiling, burst: burst, slowStart: ceiling == rate.Inf, first: newPrecedence(),
		conc: newConcurrency(m.concLimit.WithLabelValues(string(name))), m: m}
	f.limiter = rate.NewLimiter(start, f.burstFor(start))
	f.report()
	return f
}

// throttled records that the cloud throttled a call for key sent at sent,
// and slows the family down when, within window, calls for at least
// objects distinct keys were throttled. It reports whether it slowed down
// and the family's rate.
func (f *family) throttled(now, sent time.Time, key string, window time.Duration, objects int) (bool, rate.Limit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.limiter.Limit()
	if sent.Before(f.lastDecrease.Add(decreaseCooldown)) {
		return false, cur
	}
	kept := f.throttles[:0]
	for _, t := range f.throttles {
		if now.Sub(t.at) <= window {
			kept = append(kept, t)
		}
	}
	f.throttles = append(kept, throttle{now, key})
	distinct := map[string]bool{}
	for _, t := range f.throttles {
		distinct[t.key] = true
	}
	if len(distinct) < objects {
		return false, cur
	}
	// One episode: the next decrease needs fresh throttles of calls sent
	// at the new rate.
	f.throttles = nil
	if cur == rate.Inf {
		// Unlimited so far: start from the rate the cloud just refused.
		cur = rate.Limit(max(minRate, float64(f.sent.count(now))))
	}
	// What the cloud accepted since the last decrease (at most over the
	// last second) is what it allows now: a rate above the cloud's limit
	// drops to it in one step rather than by halves, and the probe's
	// overshoot is undone at once. A family that used less than half its
	// rate accepted little for that reason: it halves at most.
	since := now.Add(-time.Second)
	if f.lastDecrease.After(since) {
		since = f.lastDecrease
	}
	next := cur / 2
	if span := now.Sub(since).Seconds(); span > 0 {
		ok := rate.Limit(float64(f.accepted.countSince(since)) / span)
		used := rate.Limit(float64(f.sent.countSince(since)) / span)
		switch {
		case ok >= cur:
		case f.slowStart || used >= cur/2:
			next = ok
		default:
			next = max(ok, cur/2)
		}
	}
	f.lastDecrease = now
	f.decreases.Add(1)
	next = max(next, minRate)
	f.slowStart = false
	f.limiter.SetLimit(next)
	f.limiter.SetBurst(f.burstFor(next))
	f.m.slowdowns.WithLabelValues(string(f.name)).Inc()
	f.report()
	return true, next
}

// succeeded raises the rate, at most once per rateTick and only while the
// family uses at least half of it (an idle family's rate says nothing about
// what the cloud allows): doubling every rateTick until the first
// throttle, and then by 0.5% per tick (about 5% a second, at least
// five calls a second), up to --cloud-qps when set.
func (f *family) succeeded(now time.Time) {
	f.accepted.add(now)
	f.mu.Lock()
	defer f.mu.Unlock()
	tick := rateTick
	if f.slowStart {
		tick = probeTick
	}
	if now.Sub(f.lastGrowth) < tick {
		return
	}
	f.lastGrowth = now
	cur := f.limiter.Limit()
	if cur >= f.ceiling {
		return
	}
	// Measured over a short recent window, so that a probe's rate grows
	// from its first calls.
	w := usageWindow(cur)
	if used := float64(f.sent.countSince(now.Add(-w))) / w.Seconds(); used < float64(cur)/2 {
		return
	}
	next := cur + max(0.5, cur*0.005)
	if f.slowStart {
		next = cur * probeGrowth
	}
	next = min(f.ceiling, next)
	f.limiter.SetLimit(next)
	f.limiter.SetBurst(f.burstFor(next))
	f.report()
}

// burstFor is the burst that goes with rate r: --cloud-burst's share when
// the user set a ceiling, else a fifth of a second's calls.
func (f *family) burstFor(r rate.Limit) int {
	if f.burst > 0 {
		return max(1, min(f.burst, int(r)))
	}
	return max(1, int(r/5))
}

// rate is the family's current limit, for tests.
func (f *family) rate() rate.Limit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limiter.Limit()
}

// report sets the family's gauge; +Inf when it is not limited.
func (f *family) report() {
	v := float64(f.limiter.Limit())
	if f.limiter.Limit() == rate.Inf {
		v = math.Inf(1)
	}
	f.m.rateLimit.WithLabelValues(string(f.name)).Set(v)
}

// window counts events in the last second.
type window struct {
	mu    sync.Mutex
	times []time.Time
}

func (w *window) add(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.times = append(w.times, t)
	if len(w.times) > 4096 {
		w.times = w.times[len(w.times)-4096:]
	}
}

func (w *window) count(now time.Time) int {
	return w.countSince(now.Add(-time.Second))
}

// countSince counts the events at or after since (at most a second's
// worth are kept).
func (w *window) countSince(since time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.times {
		if !t.Before(since) {
			n++
		}
	}
	return n
}
