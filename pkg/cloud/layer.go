package cloud

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Options configure the call layer. The zero value of a field takes the
// default documented on it.
type Options struct {
	// QPS is a hard ceiling on the rate of calls to the cloud, across
	// families; 0 (the default) means none: each method family's limits
	// adapt to what the cloud accepts.
	QPS float64
	// Burst is how many calls may go at once above QPS. Default: max(1, QPS).
	Burst int
	// Timeout bounds one call. Default 30s.
	Timeout time.Duration
	// ThrottleWindow is how far back throttles count when deciding whether
	// a method family is being throttled as a whole. Default 2s.
	ThrottleWindow time.Duration
	// ThrottledObjects is how many distinct objects must be throttled
	// within ThrottleWindow before their method family slows down. Fewer
	// say something about those objects, not about the rate. Default 3.
	ThrottledObjects int
	// ShareWindow is how long a positive answer about a node's instance
	// (it exists, is shut down or not, its metadata) is shared between the
	// controllers that ask. The manager sets it to --node-monitor-period,
	// so the lifecycle controller notices a change no later than it would
	// asking itself. Default 5s (that flag's default); negative: nothing is
	// shared.
	ShareWindow time.Duration
	// Name labels the layer's metrics with its provider. Default: the
	// provider's ProviderName.
	Name string
	// BatchWindow is how long an InstanceMetadata call waits for others
	// to share its batch call, with a provider that answers in batches.
	// Default 10ms.
	BatchWindow time.Duration
	// NoBatch ignores a provider's BatchInstances and asks node by node,
	// as for a provider with only the standard interface.
	NoBatch bool
}

func (o *Options) defaults() {
	if o.Burst <= 0 {
		o.Burst = max(1, int(o.QPS))
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ThrottleWindow <= 0 {
		o.ThrottleWindow = 2 * time.Second
	}
	if o.ShareWindow == 0 {
		o.ShareWindow = 5 * time.Second
	}
	if o.ThrottledObjects <= 0 {
		o.ThrottledObjects = 3
	}
	if o.BatchWindow <= 0 {
		o.BatchWindow = 10 * time.Millisecond
	}
}

// Layer wraps one provider. It is safe for concurrent use.
type Layer struct {
	provider cloudprovider.Interface
	opts     Options
	// limiter holds every call to --cloud-qps. It never adapts: slowing
	// down is per method family.
	limiter  *rate.Limiter
	families map[Family]*family
	slots    slots
	now      func() time.Time
	// holds keeps each throttled object's calls back until its retry hint
	// has passed.
	holds holds
	// answers are shared between the controllers asking about one node.
	answers *answers
	m       *layerMetrics
	// unkeyed numbers the calls that are about no one object, so that each
	// counts as its own object when throttles are counted.
	unkeyed atomic.Uint64
}

// New wraps provider.
func New(provider cloudprovider.Interface, opts Options) *Layer {
	opts.defaults()
	if opts.Name == "" {
		opts.Name = provider.ProviderName()
	}
	limit := rate.Inf
	if opts.QPS > 0 {
		limit = rate.Limit(opts.QPS)
	}
	l := &Layer{
		provider: provider,
		opts:     opts,
		limiter:  rate.NewLimiter(limit, opts.Burst),
		families: map[Family]*family{},
		slots:    slots{held: map[string]*slot{}},
		holds:    holds{until: map[string]time.Time{}},
		now:      time.Now,
		m:        newLayerMetrics(opts.Name),
	}
	l.answers = newAnswers(opts.ShareWindow, func() time.Time { return l.now() })
	for _, f := range families {
		l.families[f] = newFamily(f, limit, opts.Burst, l.m)
	}
	return l
}

// DegradedAbandoned is how many calls of one method family may be abandoned
// at their deadline and not yet returned by the provider before the family
// reports itself degraded (Degraded): the provider is hung on that many
// objects. Each such call holds only its object's slot, so they are bounded
// by the objects there are, never by time.
const DegradedAbandoned = 16

// Degraded returns the method families with at least DegradedAbandoned
// abandoned calls the provider has not returned from, and how many.
func (l *Layer) Degraded() map[Family]int64 {
	var out map[Family]int64
	for name, f := range l.families {
		if n := f.abandoned.Load(); n >= DegradedAbandoned {
			if out == nil {
				out = map[Family]int64{}
			}
			out[name] = n
		}
	}
	return out
}

// ErrTimeout is wrapped by the error of a call abandoned after the per-call
// timeout.
var ErrTimeout = errors.New("cloud call timed out")

// ErrCallInFlight is wrapped by the error of a call refused without reaching
// the cloud because an earlier call for the same object, abandoned after its
// timeout, has not returned yet. Sending another (a second
// EnsureLoadBalancer, say) could make a second cloud resource; the caller
// retries the object with its backoff instead.
var ErrCallInFlight = errors.New("an earlier cloud call for this object is still running")

// call names one cloud call: its method and the object it is about. An
// empty key is a call about no one object (a batch lookup, a route list),
// which is not serialized.
type call struct {
	method string
	family Family
	key    string
}

// do runs one cloud call through the object's hold and slot, the method
// family's adaptive concurrency and rate limits, the --cloud-qps ceiling and
// the timeout, and records its metrics. The call runs in its own goroutine
// so that a provider that ignores its context still releases the caller at
// the deadline. A call given up at its deadline gives its place in the
// family's concurrency back at once (a timeout counts as congestion), so a
// provider hung on some objects costs only those objects; the object's slot
// stays held until the provider really returns, so no second call for the
// object can start meanwhile.
func do[T any](ctx context.Context, l *Layer, c call, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	fam := l.families[c.family]
	start := l.now()
	if c.key != "" {
		if wait, held := l.holds.held(c.key, start); held {
			l.m.held.WithLabelValues(c.method).Inc()
			return zero, fmt.Errorf("%s for %s: %w", c.method, c.key, &heldError{wait: wait})
		}
	}
	background := isBackground(ctx)
	if background {
		// Before taking the object's slot: a foreground call for the
		// same object would otherwise wait behind this one.
		if err := fam.first.yield(ctx); err != nil {
			return zero, fmt.Errorf("waiting for foreground calls before %s for %s: %w", c.method, c.key, err)
		}
	}
	var sl *slot
	if c.key != "" {
		var err error
		if sl, err = l.slots.acquire(ctx, c.key); err != nil {
			if errors.Is(err, ErrCallInFlight) {
				l.m.rejected.WithLabelValues(c.method).Inc()
				return zero, fmt.Errorf("%s for %s: %w", c.method, c.key, err)
			}
			return zero, fmt.Errorf("waiting for the running %s call for %s: %w", c.method, c.key, err)
		}
	}
	release := func() {
		if sl != nil {
			l.slots.release(c.key, sl)
		}
	}
	if err := l.admit(ctx, fam, background); err != nil {
		release()
		return zero, fmt.Errorf("waiting for the %s limits before %s: %w", fam.name, c.method, err)
	}
	if err := l.limiter.Wait(ctx); err != nil {
		fam.conc.done(l.now(), l.now(), 0, outcomeOther)
		release()
		return zero, fmt.Errorf("waiting for the cloud rate limiter before %s: %w", c.method, err)
	}
	sent := l.now()
	l.m.calls.WithLabelValues(c.method).Inc()
	fam.sent.add(sent)

	callCtx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	// mu orders giving up on the call against its return, so that the
	// slot is marked abandoned only while the call still runs and the
	// abandoned-calls gauge goes up before it comes down.
	var (
		mu               sync.Mutex
		returned, gaveUp bool
	)
	log := klog.FromContext(ctx).V(2)
	go func() {
		defer cancel()
		v, err := fn(callCtx)
		mu.Lock()
		returned = true
		wasAbandoned := gaveUp
		mu.Unlock()
		// The family learns from every answer, even one its caller no
		// longer waits for: a slow answer is the news. An abandoned call
		// gave its concurrency back already.
		l.learn(log, fam, c, sent, err, !wasAbandoned)
		// The slot is freed only now: until the provider returns, the
		// cloud may still be acting on this object.
		release()
		if wasAbandoned {
			l.m.abandoned.WithLabelValues(c.method).Dec()
			fam.abandoned.Add(-1)
		}
		done <- result{v, err}
	}()

	var r result
	select {
	case r = <-done:
	case <-callCtx.Done():
		mu.Lock()
		if returned {
			mu.Unlock()
			r = <-done
			break
		}
		gaveUp = true
		l.m.abandoned.WithLabelValues(c.method).Inc()
		fam.abandoned.Add(1)
		if sl != nil {
			sl.abandon()
		}
		outcome := outcomeOther
		if ctx.Err() == nil {
			outcome = outcomeCongested
		}
		now := l.now()
		fam.conc.done(now, sent, now.Sub(sent), outcome)
		mu.Unlock()
		if ctx.Err() == nil {
			l.m.timeouts.WithLabelValues(c.method).Inc()
			r.err = fmt.Errorf("%s: %w after %s", c.method, ErrTimeout, l.opts.Timeout)
		} else {
			r.err = ctx.Err()
		}
	}
	l.m.duration.WithLabelValues(c.method).Observe(l.now().Sub(start).Seconds())
	if r.err != nil {
		l.m.errors.WithLabelValues(c.method).Inc()
		return zero, r.err
	}
	return r.v, nil
}

// learn adapts the family to one answer: an accepted call raises its limits
// a little; a throttle holds the object back for its hint and, when several
// objects were throttled, slows the family; a timeout or a slow answer
// lowers its concurrency.
func (l *Layer) learn(log klog.Logger, fam *family, c call, sent time.Time, err error, holdsConc bool) {
	now := l.now()
	latency := now.Sub(sent)
	// An abandoned call gave its place in the family back at its deadline.
	done := func(outcome callOutcome) {
		if holdsConc {
			fam.conc.done(now, sent, latency, outcome)
		}
	}
	if err == nil {
		fam.succeeded(now)
		done(outcomeOK)
		return
	}
	retryAfter, throttled := provider.RetryAfter(err)
	if !throttled {
		outcome := outcomeOther
		if errors.Is(err, context.DeadlineExceeded) && latency >= l.opts.Timeout {
			outcome = outcomeCongested
		}
		done(outcome)
		return
	}
	l.m.throttles.WithLabelValues(c.method).Inc()
	key := c.key
	if key == "" {
		key = "#" + strconv.FormatUint(l.unkeyed.Add(1), 10)
	} else if retryAfter > 0 {
		l.holds.hold(c.key, now.Add(retryAfter), now)
	}
	slowed, next := fam.throttled(now, sent, key, l.opts.ThrottleWindow, l.opts.ThrottledObjects)
	outcome := outcomeOther
	if slowed {
		outcome = outcomeCongested
		log.Info("Cloud throttled several objects' calls; slowing this method family down", "family", fam.name, "method", c.method, "rate", float64(next))
	}
	done(outcome)
	log.Info("Cloud throttled a call; the object is retried after the cloud's hint", "method", c.method, "object", c.key, "retryAfter", retryAfter)
}

// admit waits until the family's concurrency and rate limits let one call
// go. A foreground call counts as waiting meanwhile; a background call goes
// only while none does, and gives its place back (before reserving the
// rate's next token) when one starts to wait, so background work never
// queues ahead of a foreground call for longer than one reservation.
func (l *Layer) admit(ctx context.Context, fam *family, background bool) error {
	if !background {
		fam.first.enter()
		defer fam.first.leave()
		if err := fam.conc.acquire(ctx); err != nil {
			return err
		}
		if err := fam.waitRate(ctx, nil); err != nil {
			fam.conc.done(l.now(), l.now(), 0, outcomeOther)
			return err
		}
		return nil
	}
	for {
		if err := fam.first.yield(ctx); err != nil {
			return err
		}
		if err := fam.conc.acquire(ctx); err != nil {
			return err
		}
		err := fam.waitRate(ctx, fam.first.pending)
		if err == nil {
			return nil
		}
		fam.conc.done(l.now(), l.now(), 0, outcomeOther)
		if !errors.Is(err, errYield) {
			return err
		}
	}
}

// errYield ends a background call's wait for the rate: a foreground call
// waits.
var errYield = errors.New("yielding to a foreground call")

// maxReservation is the longest a call waits on one reservation of a
// family's rate limiter. Longer, it cancels it and asks again later: the
// rate adapts, and a reservation made at a low rate would otherwise keep
// its wait after the rate went up again.
const maxReservation = 250 * time.Millisecond

// waitRate waits until the family's rate lets one call go, within ctx.
// When yield is given and says so before a reservation, it returns errYield
// instead. A call whose wait spanned a decrease of the rate asks again: its
// reservation was made at the old rate, which the cloud just refused.
func (f *family) waitRate(ctx context.Context, yield func() bool) error {
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
		if d > maxReservation {
			r.Cancel()
			wait = maxReservation
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			if d <= maxReservation && f.decreases.Load() == gen {
				return nil
			}
		case <-ctx.Done():
			if d <= maxReservation {
				r.Cancel()
			}
			return ctx.Err()
		}
	}
}
