package admission

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// minRate is the slowest a family adapts down to, in calls per second.
const minRate = 0.5

// InitialRate is the rate a family without --cloud-qps starts at, in calls
// per second, before it has learnt what the cloud allows.
const InitialRate = 100

// DecreaseCooldown is how long after a decrease throttles do not count
// towards the next one: a cloud's own token bucket is still refilling from
// the burst that caused the first, and its refusals meanwhile say nothing
// about the new rate.
const DecreaseCooldown = 250 * time.Millisecond

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

// refusedZone is how close to the rate the cloud last refused (either
// side, as a fraction of it) the additive increase slows down tenfold: the
// cloud's limit is most likely there, and every step over it costs refused
// calls until enough are refused to decrease again. Away from it the rate
// climbs at the full step, so a cloud whose limit went up is found as
// quickly as before.
const refusedZone = 0.1

// decreaseMargin is how far below what the cloud accepted a decrease
// settles: the cloud's bucket refills a little while the family climbs
// back, and absorbs the first steps over its limit.
const decreaseMargin = 0.03

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

// Limits adapt one method family's rate to what the cloud accepts: halved
// when the cloud throttles several objects' calls in a short window
// (multiplicative decrease), raised a little on every accepted call
// (additive increase) back to --cloud-qps. At the ceiling its limiter holds
// calls no more than the layer's own --cloud-qps limiter does.
type Limits struct {
	name    Family
	m       Metrics
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
	// stragglers counts the family's calls that gave their place back
	// while they ran (Pass.Straggle).
	stragglers atomic.Uint64
	ceiling    rate.Limit
	burst      int
	// slowStart: no throttle seen yet, the rate grows by a factor per
	// tick rather than by a step.
	slowStart  bool
	lastGrowth time.Time
	// refused is the family's rate when it last decreased: the rate the
	// cloud refused. Zero until the first decrease.
	refused rate.Limit

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

func newLimits(name Family, ceiling rate.Limit, burst int, m Metrics) *Limits {
	start := ceiling
	if ceiling == rate.Inf {
		// No ceiling: probe from a modest rate up, rather than send
		// everything at once and learn the cloud's limit from a burst
		// of refusals.
		start = InitialRate
		burst = 0
	}
	f := &Limits{name: name, ceiling: ceiling, burst: burst, slowStart: ceiling == rate.Inf, first: newPrecedence(),
		conc: newConcurrency(m.ConcurrencyLimit.WithLabelValues(string(name))), m: m}
	f.limiter = rate.NewLimiter(start, f.burstFor(start))
	f.report()
	return f
}

// Throttled records that the cloud throttled a call for key sent at sent,
// and slows the family down when, within window, calls for at least
// objects distinct keys were throttled. It reports whether it slowed down
// and the family's rate.
func (f *Limits) Throttled(now, sent time.Time, key string, window time.Duration, objects int) (bool, rate.Limit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.limiter.Limit()
	if sent.Before(f.lastDecrease.Add(DecreaseCooldown)) {
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
			next = ok * (1 - decreaseMargin)
		default:
			next = max(ok*(1-decreaseMargin), cur/2)
		}
	}
	f.refused = cur
	f.lastDecrease = now
	f.decreases.Add(1)
	next = max(next, minRate)
	f.slowStart = false
	f.limiter.SetLimit(next)
	f.limiter.SetBurst(f.burstFor(next))
	f.m.Slowdowns.WithLabelValues(string(f.name)).Inc()
	f.report()
	return true, next
}

// Succeeded records an accepted call and raises the rate, at most once per rateTick and only while the
// family uses at least half of it (an idle family's rate says nothing about
// what the cloud allows): doubling every rateTick until the first
// throttle, and then by 0.5% per tick (about 5% a second, at least
// five calls a second), a tenth of that within refusedZone of the rate the
// cloud last refused, up to --cloud-qps when set.
func (f *Limits) Succeeded(now time.Time) {
	f.accepted.add(now)
	f.grow(now)
}

// straggled grows the rate, in slow start, for a call that gave its place
// back while it ran (Pass.Straggle), as an answer would: calls hung on many
// objects would otherwise hold the probe at InitialRate, and the family's
// other objects behind them (the family's concurrency grows the same way).
func (f *Limits) straggled(now time.Time) {
	f.mu.Lock()
	probing := f.slowStart
	f.mu.Unlock()
	if probing {
		f.grow(now)
	}
}

// grow is Succeeded's growth.
func (f *Limits) grow(now time.Time) {
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
	step := max(0.5, cur*0.005)
	if f.refused > 0 && math.Abs(float64(cur-f.refused)) <= refusedZone*float64(f.refused) {
		step /= 10
	}
	next := cur + rate.Limit(step)
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
func (f *Limits) burstFor(r rate.Limit) int {
	if f.burst > 0 {
		return max(1, min(f.burst, int(r)))
	}
	return max(1, int(r/5))
}

// Rate is the family's current limit.
func (f *Limits) Rate() rate.Limit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limiter.Limit()
}

// RecordSent counts a call sent at t towards the family's use of its
// rate.
func (f *Limits) RecordSent(t time.Time) { f.sent.add(t) }

// Concurrency is the family's current limit on calls in flight.
func (f *Limits) Concurrency() float64 { return f.conc.current() }

// SetConcurrency sets the family's limit on calls in flight, for tests
// that need many calls in flight at once.
func (f *Limits) SetConcurrency(limit float64) {
	f.conc.mu.Lock()
	defer f.conc.mu.Unlock()
	f.conc.limit = limit
}

// report sets the family's gauge; +Inf when it is not limited.
func (f *Limits) report() {
	v := float64(f.limiter.Limit())
	if f.limiter.Limit() == rate.Inf {
		v = math.Inf(1)
	}
	f.m.RateLimit.WithLabelValues(string(f.name)).Set(v)
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

// errYield ends a background call's wait for the rate: a foreground call
// waits.
var errYield = errors.New("yielding to a foreground call")

// MaxReservation is the longest a call waits on one reservation of a
// family's rate limiter. Longer, it cancels it and asks again later: the
// rate adapts, and a reservation made at a low rate would otherwise keep
// its wait after the rate went up again.
const MaxReservation = 250 * time.Millisecond

// waitRate waits until the family's rate lets one call go, within ctx.
// When yield is given and says so before a reservation, it returns errYield
// instead. A call whose wait spanned a decrease of the rate asks again: its
// reservation was made at the old rate, which the cloud just refused.
func (f *Limits) waitRate(ctx context.Context, yield func() bool) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if yield != nil && yield() {
			return errYield
		}
		gen := f.decreases.Load()
		r := f.limiter.Reserve()
		if !r.OK() {
			return errors.New("rate limiter refused the call")
		}
		d := r.Delay()
		if d == 0 {
			return nil
		}
		wait := d
		if d > MaxReservation {
			r.Cancel()
			wait = MaxReservation
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			if d <= MaxReservation && f.decreases.Load() == gen {
				return nil
			}
		case <-ctx.Done():
			if d <= MaxReservation {
				r.Cancel()
			}
			return ctx.Err()
		}
	}
}

// ConcurrencyLimit is how many calls the family may have in flight now.
func (l *Limits) ConcurrencyLimit() int { return int(l.conc.current()) }

// Stragglers is how many of the family's calls gave their place back while
// they ran.
func (l *Limits) Stragglers() uint64 { return l.stragglers.Load() }
