// Package admission decides whether and when one cloud call may go: its
// object's hold (the cloud's retry hint) and slot (one call in flight per
// object), foreground calls before background ones, its method family's
// adaptive concurrency and rate, and the --cloud-qps ceiling. What it
// learns from each answer (accepted, throttled, slow, timed out) adapts
// those limits.
package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Family is a group of cloud methods that a cloud usually rate-limits
// together (one API, one quota): when it throttles many objects' calls of a
// family, the gate slows that family down and leaves the others alone.
type Family string

// The method families.
const (
	FamilyInstances     Family = "instances"
	FamilyLoadBalancers Family = "loadbalancers"
	FamilyRoutes        Family = "routes"
	FamilyNodeCIDRs     Family = "nodecidrs"
)

var families = []Family{FamilyInstances, FamilyLoadBalancers, FamilyRoutes, FamilyNodeCIDRs}

// ErrCallInFlight is wrapped by the error of a call refused because an
// earlier call for the same object, abandoned after its timeout, has not
// returned yet.
var ErrCallInFlight = errors.New("an earlier cloud call for this object is still running")

// Metrics are the collectors the gate reports to, curried with the
// provider's name: by method (Held, Rejected, Throttles) or by family
// (the others).
type Metrics struct {
	Held, Rejected, Throttles   *prometheus.CounterVec
	ConcurrencyLimit, RateLimit *prometheus.GaugeVec
	Slowdowns                   *prometheus.CounterVec
}

// Options configure a Gate; the call layer's Options document them.
type Options struct {
	QPS              float64
	Burst            int
	Timeout          time.Duration
	ThrottleWindow   time.Duration
	ThrottledObjects int
	Now              func() time.Time
	Metrics          Metrics
	// Shared, if set, is waited on after the --cloud-qps ceiling: the
	// budget of the cloud account this gate's calls share with other
	// gates (a multi-tenant Outrigger's tenants on one account).
	Shared func(context.Context) error
}

// Gate admits the calls of one provider. It is safe for concurrent use.
type Gate struct {
	opts Options
	// limiter holds every call to --cloud-qps. It never adapts: slowing
	// down is per method family.
	limiter *rate.Limiter
	limits  map[Family]*Limits
	slots   slots
	// holds keeps each throttled object's calls back until its retry hint
	// has passed.
	holds holds
	// unkeyed numbers the calls that are about no one object, so that each
	// counts as its own object when throttles are counted.
	unkeyed atomic.Uint64
}

// New returns a Gate; opts' fields are set (the call layer applies its
// defaults).
func New(opts Options) *Gate {
	limit := rate.Inf
	if opts.QPS > 0 {
		limit = rate.Limit(opts.QPS)
	}
	g := &Gate{
		opts:    opts,
		limiter: rate.NewLimiter(limit, opts.Burst),
		limits:  map[Family]*Limits{},
		slots:   slots{held: map[string]*slot{}},
		holds:   newHolds(),
	}
	for _, f := range families {
		g.limits[f] = newLimits(f, limit, opts.Burst, opts.Metrics)
	}
	return g
}

// Call names one cloud call: its method, family and the object it is
// about. An empty Key is a call about no one object (a batch lookup, a
// route list), which is not serialized.
type Call struct {
	Method string
	Family Family
	Key    string
	// Kept: the call's answer is kept for its object's next call of the
	// same method when its caller left it running (an answer that depends
	// on the object alone, such as an instance's metadata), and its caller
	// hears when it returns.
	Kept bool
}

// Pass is an admitted call. Its holder reports how the call ended:
// Returned once the provider returns, and Abandon before that if it gives
// up on the call at its deadline.
type Pass struct {
	g    *Gate
	lim  *Limits
	c    Call
	slot *slot
	sent time.Time
	// straggled: the call gave its place in the family's concurrency back
	// while it still ran (Straggle).
	straggled atomic.Bool
	// relisted: its caller reads the call's outcome again from a later
	// list (Relisted), so leaving it costs no second call.
	relisted bool
	// deadlinePassed: the call ran into the gate's Timeout (DeadlinePassed).
	deadlinePassed bool
}

// Admit waits until c may go: its object is not held and its slot is
// free, no foreground call waits before a background one, and the family's
// concurrency and rate and the --cloud-qps ceiling let it go.
func (g *Gate) Admit(ctx context.Context, c Call) (*Pass, error) {
	lim := g.limits[c.Family]
	if c.Key != "" {
		// A call whose abandoned predecessor still runs is told so
		// first: that is why it cannot go, whatever its hold.
		if g.slots.abandonedRunning(c.Key) {
			g.opts.Metrics.Rejected.WithLabelValues(c.Method).Inc()
			return nil, fmt.Errorf("%s for %s: %w", c.Method, c.Key, ErrCallInFlight)
		}
		if held := g.holds.held(c.Key, g.opts.Now()); held != nil {
			g.opts.Metrics.Held.WithLabelValues(c.Method).Inc()
			return nil, fmt.Errorf("%s for %s: %w", c.Method, c.Key, held)
		}
	}
	background := IsBackground(ctx)
	if background {
		// Before taking the object's slot: a foreground call for the
		// same object would otherwise wait behind this one.
		if err := lim.first.yield(ctx); err != nil {
			return nil, fmt.Errorf("waiting for foreground calls before %s for %s: %w", c.Method, c.Key, err)
		}
	}
	p := &Pass{g: g, lim: lim, c: c, relisted: IsRelisted(ctx)}
	if c.Key != "" {
		var err error
		if p.slot, err = g.slots.acquire(ctx, c.Key); err != nil {
			if errors.Is(err, ErrCallInFlight) {
				g.opts.Metrics.Rejected.WithLabelValues(c.Method).Inc()
				return nil, fmt.Errorf("%s for %s: %w", c.Method, c.Key, err)
			}
			return nil, fmt.Errorf("waiting for the running %s call for %s: %w", c.Method, c.Key, err)
		}
	}
	if err := g.admit(ctx, lim, background, c.Key == ""); err != nil {
		p.release()
		return nil, fmt.Errorf("waiting for the %s limits before %s: %w", lim.name, c.Method, err)
	}
	if err := g.limiter.Wait(ctx); err != nil {
		lim.conc.done(g.opts.Now(), g.opts.Now(), 0, outcomeOther)
		p.release()
		return nil, fmt.Errorf("waiting for the cloud rate limiter before %s: %w", c.Method, err)
	}
	if g.opts.Shared != nil {
		if err := g.opts.Shared(ctx); err != nil {
			lim.conc.done(g.opts.Now(), g.opts.Now(), 0, outcomeOther)
			p.release()
			return nil, fmt.Errorf("waiting for the cloud account's budget before %s: %w", c.Method, err)
		}
	}
	p.sent = g.opts.Now()
	lim.sent.add(p.sent)
	return p, nil
}

// Abandon records that the caller gave up on the call at a deadline while
// the provider still runs it: the call gives its place in the family's
// concurrency back at once (its timeout counts as congestion only when no
// call sent after it was answered), so a provider hung on some objects
// costs only those objects, while the object's slot stays held until the
// provider returns.
func (p *Pass) Abandon(timedOut bool) {
	p.lim.abandoned.Add(1)
	if p.slot != nil {
		p.slot.abandon()
	}
	outcome := outcomeOther
	now := p.g.opts.Now()
	if timedOut {
		outcome = outcomeTimedOut
		if p.c.Key != "" {
			p.g.holds.timedOut(p.c.Key, p.g.opts.Timeout, now)
		}
	}
	if p.straggled.Load() {
		p.lim.conc.adaptOnly(now, p.sent, now.Sub(p.sent), outcome)
		return
	}
	p.lim.conc.done(now, p.sent, now.Sub(p.sent), outcome)
}

// StraggleAfter is how long the call may run before it is a straggler: far
// past what its family's answers take; ok is false when that is not before
// its timeout.
func (p *Pass) StraggleAfter() (time.Duration, bool) {
	return p.lim.conc.straggleAfter(p.g.opts.Timeout)
}

// Leave records that the caller stopped waiting for a straggler (after
// Straggle, while the call runs): its object's next calls are refused with
// ErrCallInFlight until the provider returns, as after Abandon, but the
// call is not counted abandoned (Abandoned) unless its deadline passes too.
func (p *Pass) Leave() {
	if p.slot != nil {
		p.slot.abandon()
	}
}

// LeaveAfter is how long the caller waits for the call before it goes on
// without the answer; ok is false when it waits to the end. Only a call
// about one object may be left (its object keeps its slot, so no second
// call for it goes out meanwhile): once it straggles and has run minLeave,
// or, before its family has any answer to compare with, noAnswersLeave (a
// slow cloud's first calls are not taken for hung ones). A relisted call
// is left as soon as it straggles: its outcome is read from the next list
// whenever it comes, so leaving costs neither a second call nor a late
// answer; so is a kept one (Call.Kept), whose answer waits for its
// object's next call.
func (p *Pass) LeaveAfter() (time.Duration, bool) {
	if p.c.Key == "" {
		return 0, false
	}
	if p.relisted || p.c.Kept {
		return p.StraggleAfter()
	}
	d, _ := p.StraggleAfter()
	d = max(d, minLeave)
	if !p.lim.conc.hasAnswers() {
		d = max(d, noAnswersLeave)
	}
	return d, p.g.opts.Timeout <= 0 || d < p.g.opts.Timeout
}

// Bounds of LeaveAfter. Leaving costs the object more than straggling
// costs the family: the object is retried with its backoff, after the
// call's answer, which comes later than it would have been read. So a
// caller waits a second at least (a slow answer of a fast family is still
// read), and two before its family has any answer, so that a cloud whose
// first answers take a second or two is still waited for, and one that
// hangs on many objects from the start holds each worker no longer than
// that.
const (
	minLeave       = time.Second
	noAnswersLeave = 2 * time.Second
)

// Straggle records that the call runs past StraggleAfter: it gives its
// place in the family's concurrency back at once, so that calls hung on
// some objects cost only those objects in time too (the others do not wait
// for their timeouts), while its object keeps its slot until the provider
// returns; false when it straggled already. Its answer, when it comes,
// does not adapt the family: one object's slowness says nothing of the
// cloud's (a timeout while no later call was answered still does, in
// Abandon). The caller calls it before Abandon and while the call runs.
func (p *Pass) Straggle() bool {
	if p.straggled.CompareAndSwap(false, true) {
		p.lim.stragglers.Add(1)
		p.lim.conc.release()
		p.lim.straggled(p.g.opts.Now())
		return true
	}
	return false
}

// DeadlinePassed records, before Returned, that the call's context ended
// at the Timeout (its own deadline, not its caller's): a
// context.DeadlineExceeded answer is then a timeout. The deadline is real
// time, so it is read from the context, never compared with Options.Now,
// which a test may step.
func (p *Pass) DeadlinePassed() { p.deadlinePassed = true }

// Returned records the provider's answer, after Abandon when abandoned:
// the family learns from every answer, even one its caller no longer
// waits for (a slow answer is the news), and the object's slot is freed
// only now (until the provider returns, the cloud may still be acting on
// the object).
func (p *Pass) Returned(log klog.Logger, err error, abandoned bool) {
	place := placeHeld
	switch {
	case abandoned:
		place = placeGone
	case p.straggled.Load():
		place = placeStraggled
	}
	p.g.learn(log, p.lim, p.c, p.sent, err, place, p.deadlinePassed)
	p.release()
	if abandoned {
		p.lim.abandoned.Add(-1)
	}
}

func (p *Pass) release() {
	if p.slot != nil {
		p.g.slots.release(p.c.Key, p.slot)
	}
}

// Abandoned returns, by family, the calls given up at their deadline whose
// provider has not returned yet.
func (g *Gate) Abandoned() map[Family]int64 {
	out := make(map[Family]int64, len(g.limits))
	for name, f := range g.limits {
		out[name] = f.abandoned.Load()
	}
	return out
}

// Limits returns family's adaptive limits.
func (g *Gate) Limits(family Family) *Limits { return g.limits[family] }

// All returns every family's adaptive limits.
func (g *Gate) All() map[Family]*Limits { return g.limits }

// QPS is the --cloud-qps ceiling (rate.Inf when none).
func (g *Gate) QPS() rate.Limit { return g.limiter.Limit() }

// InFlight is how many objects have a call running.
func (g *Gate) InFlight() int { return g.slots.inFlight() }

// learn adapts the family to one answer: an accepted call raises its limits
// a little; a throttle holds the object back for its hint and, when several
// objects were throttled, slows the family; a timeout or a slow answer
// lowers its concurrency.
// What a returning call still has of its family's concurrency.
type place int

const (
	placeHeld      place = iota // its place: the answer ends it and adapts the family
	placeStraggled              // given back while it ran: the answer may adapt the family
	placeGone                   // abandoned at its deadline, which adapted the family
)

func (g *Gate) learn(log klog.Logger, lim *Limits, c Call, sent time.Time, err error, pl place, deadlinePassed bool) {
	holdsConc := pl == placeHeld
	now := g.opts.Now()
	latency := now.Sub(sent)
	// An abandoned call gave its place in the family back at its deadline.
	done := func(outcome callOutcome) {
		switch pl {
		case placeHeld:
			lim.conc.done(now, sent, latency, outcome)
		case placeStraggled:
			lim.conc.stragglerAnswered(now, sent, latency, outcome)
		}
	}
	if err == nil {
		lim.Succeeded(now)
		if c.Key != "" {
			g.holds.answered(c.Key, now)
		}
		done(outcomeOK)
		return
	}
	retryAfter, throttled := provider.RetryAfter(err)
	if !throttled {
		outcome := outcomeOther
		if deadlinePassed && errors.Is(err, context.DeadlineExceeded) {
			outcome = outcomeTimedOut
			// An abandoned call was held back already, at its deadline.
			if c.Key != "" && holdsConc {
				g.holds.timedOut(c.Key, g.opts.Timeout, now)
			}
		}
		done(outcome)
		return
	}
	g.opts.Metrics.Throttles.WithLabelValues(c.Method).Inc()
	key := c.Key
	if key == "" {
		key = "#" + strconv.FormatUint(g.unkeyed.Add(1), 10)
	} else if retryAfter > 0 {
		g.holds.throttled(c.Key, now.Add(retryAfter), now)
	}
	slowed, next := lim.Throttled(now, sent, key, g.opts.ThrottleWindow, g.opts.ThrottledObjects)
	outcome := outcomeOther
	if slowed {
		outcome = outcomeCongested
		log.Info("Cloud throttled several objects' calls; slowing this method family down", "family", lim.name, "method", c.Method, "rate", float64(next))
	}
	done(outcome)
	log.Info("Cloud throttled a call; the object is retried after the cloud's hint", "method", c.Method, "object", c.Key, "retryAfter", retryAfter)
}

// admit waits until the family's concurrency and rate limits let one call
// go. A foreground call counts as waiting meanwhile; a background call goes
// only while none does, and gives its place back (before reserving the
// rate's next token) when one starts to wait, so background work never
// queues ahead of a foreground call for longer than one reservation. A
// foreground call about the whole family (whole: a list) waits ahead of
// those about one object.
func (g *Gate) admit(ctx context.Context, lim *Limits, background, whole bool) error {
	if !background {
		lim.first.enter()
		defer lim.first.leave()
		acquire := lim.conc.acquire
		if whole {
			acquire = lim.conc.acquireAhead
		}
		if err := acquire(ctx); err != nil {
			return err
		}
		if err := lim.waitRate(ctx, nil); err != nil {
			lim.conc.done(g.opts.Now(), g.opts.Now(), 0, outcomeOther)
			return err
		}
		return nil
	}
	for {
		if err := lim.first.yield(ctx); err != nil {
			return err
		}
		if err := lim.conc.acquire(ctx); err != nil {
			return err
		}
		err := lim.waitRate(ctx, lim.first.pending)
		if err == nil {
			return nil
		}
		lim.conc.done(g.opts.Now(), g.opts.Now(), 0, outcomeOther)
		if !errors.Is(err, errYield) {
			return err
		}
	}
}
