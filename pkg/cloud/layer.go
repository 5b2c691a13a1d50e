package cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
)

// Options configure the call layer. The zero value of a field takes the
// default documented on it.
type Options struct {
	// QPS is the sustained rate of calls to the cloud; 0 means unlimited.
	QPS float64
	// Burst is how many calls may go at once above QPS. Default: max(1, QPS).
	Burst int
	// Timeout bounds one call. Default 30s.
	Timeout time.Duration
	// ThrottleBackoff is the first pause after the cloud throttles; it
	// doubles with every throttle in a row up to MaxThrottleBackoff. A
	// Retry-After the cloud sends wins when it is longer. Default 500ms.
	ThrottleBackoff time.Duration
	// MaxThrottleBackoff caps the pause. Default 30s.
	MaxThrottleBackoff time.Duration
}

func (o *Options) defaults() {
	if o.Burst <= 0 {
		o.Burst = max(1, int(o.QPS))
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ThrottleBackoff <= 0 {
		o.ThrottleBackoff = 500 * time.Millisecond
	}
	if o.MaxThrottleBackoff <= 0 {
		o.MaxThrottleBackoff = 30 * time.Second
	}
}

// Layer wraps one provider. It is safe for concurrent use.
type Layer struct {
	provider cloudprovider.Interface
	opts     Options
	limiter  *rate.Limiter
	gate     throttleGate
	now      func() time.Time
	adaptMu  sync.Mutex
	// lastDecrease is when the rate was last halved: calls sent before it
	// went out at the old rate, so their throttles do not halve it again.
	lastDecrease time.Time
	recent       window
	// accepted counts the calls the cloud answered without throttling.
	accepted window
}

// window counts calls in the last second.
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
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.times {
		if now.Sub(t) <= time.Second {
			n++
		}
	}
	return n
}

// New wraps provider.
func New(provider cloudprovider.Interface, opts Options) *Layer {
	opts.defaults()
	limit := rate.Inf
	if opts.QPS > 0 {
		limit = rate.Limit(opts.QPS)
	}
	return &Layer{
		provider: provider,
		opts:     opts,
		limiter:  rate.NewLimiter(limit, opts.Burst),
		now:      time.Now,
	}
}

// Provider returns the wrapped provider, for calls that are not cloud API
// calls (ProviderName, HasClusterID).
func (l *Layer) Provider() cloudprovider.Interface { return l.provider }

// ErrTimeout is wrapped by the error of a call abandoned after the per-call
// timeout.
var ErrTimeout = errors.New("cloud call timed out")

// Throttled reports whether err says the cloud throttled the caller: any
// error in the chain with a RetryAfter() time.Duration method, as
// k8s.io/cloud-provider/api.RetryError has.
func Throttled(err error) (retryAfter time.Duration, ok bool) {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfter(), true
	}
	return 0, false
}

// do runs one cloud call through the gate, the limiter and the timeout, and
// records its metrics. The call runs in its own goroutine so that a provider
// that ignores its context still releases the caller at the deadline.
func do[T any](ctx context.Context, l *Layer, method string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	start := l.now()
	if err := l.gate.wait(ctx); err != nil {
		return zero, fmt.Errorf("waiting for the cloud's throttle pause before %s: %w", method, err)
	}
	if err := l.limiter.Wait(ctx); err != nil {
		return zero, fmt.Errorf("waiting for the cloud rate limiter before %s: %w", method, err)
	}
	sent := l.now()
	callsTotal.WithLabelValues(method).Inc()
	if l.opts.QPS <= 0 {
		l.recent.add(l.now())
	}

	callCtx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(callCtx)
		done <- result{v, err}
	}()

	var r result
	select {
	case r = <-done:
	case <-callCtx.Done():
		if ctx.Err() == nil {
			timeoutsTotal.WithLabelValues(method).Inc()
			r.err = fmt.Errorf("%s: %w after %s", method, ErrTimeout, l.opts.Timeout)
		} else {
			r.err = ctx.Err()
		}
	}
	callDuration.WithLabelValues(method).Observe(l.now().Sub(start).Seconds())

	if r.err != nil {
		errorsTotal.WithLabelValues(method).Inc()
		if retryAfter, ok := Throttled(r.err); ok {
			throttlesTotal.WithLabelValues(method).Inc()
			pause := l.gate.throttled(l.now(), retryAfter, l.opts.ThrottleBackoff, l.opts.MaxThrottleBackoff)
			rate := l.slowDown(sent)
			klog.FromContext(ctx).V(2).Info("Cloud throttled; pausing all cloud calls", "method", method, "pause", pause, "rate", rate)
		}
		return zero, r.err
	}
	l.gate.succeeded()
	l.accepted.add(l.now())
	l.speedUp()
	return r.v, nil
}

// minRate is the slowest the layer adapts down to, in calls per second.
const minRate = 0.5

// slowDown halves the call rate after a throttle (multiplicative decrease),
// so that a --cloud-qps set above what the cloud accepts is corrected instead
// of being throttled again after every pause. It returns the new rate. As in
// TCP, one burst of throttles halves the rate once: a throttle of a call
// sent before the last decrease says nothing about the new rate.
func (l *Layer) slowDown(sentAt time.Time) rate.Limit {
	l.adaptMu.Lock()
	defer l.adaptMu.Unlock()
	cur := l.limiter.Limit()
	if sentAt.Before(l.lastDecrease) {
		return cur
	}
	l.lastDecrease = l.now()
	if cur == rate.Inf {
		// Unlimited so far: start from the rate the cloud just refused.
		cur = rate.Limit(max(minRate, l.recentRate()))
	}
	next := cur / 2
	// What the cloud accepted over the last second is what it allows now:
	// a burst refused mostly should not take five halvings to learn that.
	if ok := rate.Limit(l.accepted.count(l.now())); ok >= 1 && ok < next {
		next = ok
	}
	next = max(next, minRate)
	l.limiter.SetLimit(next)
	l.limiter.SetBurst(max(1, int(next)))
	return next
}

// speedUp raises the rate by a little on every success (additive increase)
// back up to the configured --cloud-qps.
func (l *Layer) speedUp() {
	l.adaptMu.Lock()
	defer l.adaptMu.Unlock()
	cur, ceiling := l.limiter.Limit(), l.ceiling()
	if cur >= ceiling {
		return
	}
	next := min(ceiling, cur+rate.Limit(0.05)+cur*0.02)
	if next == rate.Inf {
		l.limiter.SetLimit(rate.Inf)
		return
	}
	l.limiter.SetLimit(next)
	l.limiter.SetBurst(max(1, min(l.opts.Burst, int(next))))
}

func (l *Layer) ceiling() rate.Limit {
	if l.opts.QPS <= 0 {
		return rate.Inf
	}
	return rate.Limit(l.opts.QPS)
}

// recentRate estimates calls per second over the last second, for an
// unlimited layer's first throttle.
func (l *Layer) recentRate() float64 {
	return float64(l.recent.count(l.now()))
}

// throttleGate holds every caller back while the cloud has asked us to slow
// down. One throttled call pauses all of them: the cloud's limit is per
// account, so the other callers would be refused too.
type throttleGate struct {
	mu          sync.Mutex
	until       time.Time
	consecutive int
}

func (g *throttleGate) wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		d := time.Until(g.until)
		g.mu.Unlock()
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func (g *throttleGate) throttled(now time.Time, retryAfter, base, maxPause time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Calls sent before the pause began come back throttled during it: they
	// are the same episode, not a reason to pause longer.
	if now.Before(g.until) && retryAfter <= g.until.Sub(now) {
		return g.until.Sub(now)
	}
	pause := base << min(g.consecutive, 16)
	if pause > maxPause || pause <= 0 {
		pause = maxPause
	}
	if retryAfter > pause {
		pause = retryAfter
	}
	g.consecutive++
	if until := now.Add(pause); until.After(g.until) {
		g.until = until
	}
	return pause
}

func (g *throttleGate) succeeded() {
	g.mu.Lock()
	g.consecutive = 0
	g.mu.Unlock()
}
