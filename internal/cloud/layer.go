package cloud

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/sharing"
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
	// Timeout bounds one call. Default 30s; negative (NoTimeout): no
	// deadline, as upstream's cloud-controller-manager, which waits for
	// every call.
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
	// RefreshPeriod is how long the metadata a node's initialization got
	// (an InstanceMetadata call not marked Background) answers the
	// background lookups of the address refresh instead of the cloud: a
	// node just initialized is not asked about again in the same period.
	// The manager sets it to --node-status-update-frequency, the refresh's
	// period. 0 (the default): background lookups always ask.
	RefreshPeriod time.Duration
	// Account, if set, is the cloud account's budget this layer shares
	// with the layers of other tenants on that account.
	Account *Account
	// Tenant names this layer's tenant in tenant mode: its turn in
	// Account, and the tenant label of its metrics ("" for a single
	// cluster), so that one process's tenants are told apart.
	Tenant string
	// Clock tells the time of the objects' holds, the families' windows
	// and the shared and kept answers, and times when a running call
	// straggles and when its caller leaves it. Default: the real clock;
	// tests pass a fake one and step it, instead of waiting the windows
	// out. A call's deadline (Timeout) is its context's, on the real
	// clock: the provider reads it.
	Clock clock.WithDelayedExecution
}

func (o *Options) defaults() {
	if o.Burst <= 0 {
		o.Burst = max(1, int(o.QPS))
	}
	if o.Timeout == 0 {
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
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Family is a group of cloud methods that a cloud usually rate-limits
// together (one API, one quota): when it throttles many objects' calls of a
// family, the layer slows that family down and leaves the others alone.
type Family = admission.Family

// The method families.
const (
	FamilyInstances     = admission.FamilyInstances
	FamilyLoadBalancers = admission.FamilyLoadBalancers
	FamilyRoutes        = admission.FamilyRoutes
	FamilyNodeCIDRs     = admission.FamilyNodeCIDRs
)

// Layer wraps one provider. It is safe for concurrent use.
type Layer struct {
	provider cloudprovider.Interface
	opts     Options
	// gate decides whether and when each call may go.
	gate *admission.Gate
	// answers are shared between the controllers asking about one node.
	answers *sharing.Answers
	// answered keeps initializations' answers for the address refresh
	// (nil without Options.RefreshPeriod).
	answered *sharing.Answered
	// prunedAt is when answered was last pruned (unix nanoseconds).
	prunedAt atomic.Int64
	m        *layerMetrics

	// kept are the answers of calls their callers left running
	// (ErrStillRunning), by object (see keep).
	keptMu sync.Mutex
	kept   map[string]detachedAnswer

	// workers run the calls.
	workers *workers
}

// detachedAnswer is the answer of a detached call: one its caller stopped
// waiting for, left running (ErrStillRunning).
type detachedAnswer struct {
	method string
	v      any
	err    error
	at     time.Time
	// ready: the call's object slot is free. The answer is recorded
	// before the slot is given back (so that no call goes to the cloud in
	// between and is answered by a stale failure after it), and handed out
	// only after: the call after the one it answers finds the slot free.
	ready bool
}

// keptFor is how long a kept answer waits for its object's next call: its
// caller hears when the call returns (WhenDetachedReturns) and asks again at
// once; one that did not ask within this reads the cloud anew.
const keptFor = 30 * time.Second

// keep records the answer of a call its caller left running: an error is
// handed once to the object's next call, whatever its method, so that its
// controller reports the provider's own words (a plugin unreachable, say);
// the answer of a call about the object alone (c.answerIsPerObject) is handed once
// to its next call of the same method, instead of a second cloud call.
func (l *Layer) keep(c call, v any, err error) {
	if err == nil && !c.answerIsPerObject() {
		return
	}
	l.keptMu.Lock()
	defer l.keptMu.Unlock()
	if l.kept == nil {
		l.kept = map[string]detachedAnswer{}
	}
	l.kept[c.key] = detachedAnswer{method: c.method, v: v, err: err, at: l.opts.Clock.Now()}
}

// keptReady marks what keep recorded for c's object as ready to hand out:
// the call that answered it has given its object's slot back.
func (l *Layer) keptReady(c call) {
	l.keptMu.Lock()
	defer l.keptMu.Unlock()
	if a, found := l.kept[c.key]; found {
		a.ready = true
		l.kept[c.key] = a
	}
}

// takeKept returns, once, what keep recorded for c's object that is c's:
// ok is false when nothing is.
func (l *Layer) takeKept(c call) (v any, err error, ok bool) {
	l.keptMu.Lock()
	defer l.keptMu.Unlock()
	a, found := l.kept[c.key]
	switch {
	case !found, !a.ready:
		return nil, nil, false
	case a.err != nil:
	case l.opts.Clock.Now().Sub(a.at) > keptFor:
		delete(l.kept, c.key)
		return nil, nil, false
	case a.method != c.method:
		return nil, nil, false // another method's answer, for its own next call
	}
	delete(l.kept, c.key)
	return a.v, a.err, true
}

// New wraps provider.
func New(provider cloudprovider.Interface, opts Options) *Layer {
	opts.defaults()
	if opts.Name == "" {
		opts.Name = provider.ProviderName()
	}
	l := &Layer{
		provider: provider,
		opts:     opts,
		m:        newLayerMetrics(opts.Name, opts.Tenant),
		workers:  newWorkers(),
	}
	now := opts.Clock.Now
	l.gate = admission.New(admission.Options{
		QPS:              opts.QPS,
		Burst:            opts.Burst,
		Timeout:          opts.Timeout,
		ThrottleWindow:   opts.ThrottleWindow,
		ThrottledObjects: opts.ThrottledObjects,
		Now:              now,
		Shared:           opts.shared(),
		Metrics: admission.Metrics{
			Held:             l.m.held,
			Rejected:         l.m.rejected,
			Throttles:        l.m.throttles,
			ConcurrencyLimit: l.m.concLimit,
			RateLimit:        l.m.rateLimit,
			Slowdowns:        l.m.slowdowns,
		},
	})
	l.answers = sharing.NewAnswers(opts.ShareWindow, now)
	if opts.RefreshPeriod > 0 {
		l.answered = sharing.NewAnswered()
	}
	return l
}

// shared is the wait on the account's budget, nil without an account.
func (o Options) shared() func(context.Context) error {
	if o.Account == nil {
		return nil
	}
	a, tenant := o.Account, o.Tenant
	return func(ctx context.Context) error { return a.Wait(ctx, tenant) }
}

// pruneAnswered forgets the initializations' answers older than the
// refresh period, at most once a period (nodes deleted right after joining
// would otherwise stay).
func (l *Layer) pruneAnswered(now time.Time) {
	last := l.prunedAt.Load()
	if now.Sub(time.Unix(0, last)) < l.opts.RefreshPeriod || !l.prunedAt.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	l.answered.Prune(now, l.opts.RefreshPeriod)
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
	for name, n := range l.gate.Abandoned() {
		if n >= DegradedAbandoned {
			if out == nil {
				out = map[Family]int64{}
			}
			out[name] = n
		}
	}
	return out
}

// NoTimeout as Options.Timeout leaves calls without a deadline.
const NoTimeout time.Duration = -1

// ErrTimeout is wrapped by the error of a call abandoned after the per-call
// timeout.
var ErrTimeout = errors.New("cloud call timed out")

// ErrStillRunning is wrapped by the error of a call its caller stopped
// waiting for because it ran far past what its method's answers take (a
// straggler): the call goes on, its object's next calls are refused with
// ErrCallInFlight until the provider returns, and the caller looks at the
// object again when it does (WhenDetachedReturns).
var ErrStillRunning = errors.New("cloud call still running")

// ErrCallInFlight is wrapped by the error of a call refused without reaching
// the cloud because an earlier call for the same object, abandoned after its
// timeout, has not returned yet. Sending another (a second
// EnsureLoadBalancer, say) could make a second cloud resource; the caller
// waits for that call's return instead (WhenDetachedReturns) or retries the
// object with its backoff.
var ErrCallInFlight = admission.ErrCallInFlight

// Background marks the calls made with ctx as background work: periodic
// passes over objects that are already served (the address refresh, the
// lifecycle check). Within a method family, a background call is sent only
// while no foreground call (initializing a node, ensuring a load balancer,
// creating a route) waits for the family's limits, so that when the cloud's
// rate is the bottleneck a refresh pass does not delay a joining node.
// Background calls still get every slot the foreground leaves unused.
func Background(ctx context.Context) context.Context { return admission.Background(ctx) }

// Relisted marks the calls made with ctx as ones whose outcome their caller
// reads again from a later list rather than from the answer (the route
// controller's creates and deletes, seen in its next pass's ListRoutes).
// Such a call's caller goes on without it as soon as it straggles, even
// before its family has any answer: leaving it costs no second call (its
// object's slot refuses one while it runs) and no late answer.
func Relisted(ctx context.Context) context.Context { return admission.Relisted(ctx) }

// call names one cloud call: its method and the object it is about. An
// empty key is a call about no one object (a batch lookup, a route list),
// which is not serialized.
type call struct {
	method string
	family Family
	key    string
}

// answerIsPerObject tells whether the call's answer depends on its object alone,
// so that an answer its caller no longer waited for still answers the
// object's next call of the method: a node's instance calls. (A load
// balancer call's answer depends on its backends too, which may have
// changed by the next call.)
func (c call) answerIsPerObject() bool { return c.family == FamilyInstances && c.key != "" }

// WhenDetachedReturns tells the layer what to do when a call made with ctx
// returns after its caller stopped waiting for it (ErrStillRunning): its
// controller requeues the object, whose next call of the method then reads
// the kept answer (a node's instance calls) or goes out at once (the others).
func WhenDetachedReturns(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, detachedReturnsKey{}, f)
}

type detachedReturnsKey struct{}

// WhenDetachedTimesOut tells the layer what to do when a call made with ctx,
// left running (ErrStillRunning), reaches its timeout before the provider
// returns: err says so, as the caller would have been told had it waited
// (ErrTimeout), so that the object's users hear of it (an Event).
func WhenDetachedTimesOut(ctx context.Context, f func(err error)) context.Context {
	return context.WithValue(ctx, detachedTimesOutKey{}, f)
}

type detachedTimesOutKey struct{}

// do runs one cloud call: admitted by the gate (the object's hold and
// slot, the method family's adaptive concurrency and rate, the --cloud-qps
// ceiling), sent to the provider within the timeout, and counted in the
// metrics. The call runs in its own goroutine so that a provider that
// ignores its context still releases the caller at the deadline; the gate
// hears of a call running far past its family's answers (a straggler) and
// of one given up at its deadline at once, and of its answer whenever the
// provider returns.
func do[T any](ctx context.Context, l *Layer, c call, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	// The object's last call was left running and has returned since: its
	// answer is this call's (see keep).
	if c.key != "" {
		if v, err, ok := l.takeKept(c); ok {
			if err != nil {
				return zero, fmt.Errorf("%s: an earlier call for this object, left running, failed: %w", c.method, err)
			}
			l.m.keptAnswers.WithLabelValues(c.method).Inc()
			t, _ := v.(T)
			return t, nil
		}
	}
	start := l.opts.Clock.Now()
	pass, err := l.gate.Admit(ctx, admission.Call{Method: c.method, Family: c.family, Key: c.key, Kept: c.answerIsPerObject()})
	if err != nil {
		return zero, err
	}
	l.m.calls.WithLabelValues(c.method).Inc()

	callCtx, cancel := context.WithCancel(ctx)
	if l.opts.Timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, l.opts.Timeout)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	// mu orders giving up on the call against its return, so that the
	// pass is abandoned only while the call still runs and the
	// abandoned-calls gauge goes up before it comes down.
	var (
		mu                     sync.Mutex
		returned, gaveUp, left bool
	)
	// abandoned is the gauge the call went up on: it comes down on the
	// same one, so a call returning after its tenant's series were
	// deleted (ForgetTenant) does not make a new series of -1. mu guards.
	var abandoned prometheus.Gauge
	// abandon gives the call up at its deadline (or its caller's
	// cancellation), while it runs. mu held.
	abandon := func() {
		gaveUp = true
		abandoned = l.m.abandoned.WithLabelValues(c.method)
		abandoned.Inc()
		pass.Abandon(ctx.Err() == nil)
		if ctx.Err() == nil {
			l.m.timeouts.WithLabelValues(c.method).Inc()
		}
	}
	log := klog.FromContext(ctx).V(2)
	// A call far past what its family's answers take gives its place in
	// the family back, and its caller (a controller's worker) goes on to
	// other objects, while its object keeps its slot until the provider
	// returns: hung calls cost the others no wait for their timeouts,
	// however many objects they hang on.
	stopStraggle := func() bool { return false }
	if after, ok := pass.StraggleAfter(); ok {
		stopStraggle = l.opts.Clock.AfterFunc(after, func() {
			mu.Lock()
			defer mu.Unlock()
			if !returned && !gaveUp && pass.Straggle() {
				l.m.straggled.WithLabelValues(c.method).Inc()
			}
		}).Stop
	}
	var leave <-chan time.Time
	leaveAfter, mayLeave := pass.LeaveAfter()
	if mayLeave {
		t := l.opts.Clock.NewTimer(leaveAfter)
		defer t.Stop()
		leave = t.C()
	}
	l.workers.run(func() {
		defer cancel()
		defer stopStraggle()
		v, err := fn(callCtx)
		if errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			pass.DeadlinePassed()
		}
		mu.Lock()
		returned = true
		wasAbandoned, wasDetached, gauge := gaveUp, left, abandoned
		if left {
			l.keep(c, v, err)
		}
		mu.Unlock()
		pass.Returned(log, err, wasAbandoned)
		if wasDetached {
			l.keptReady(c)
		}
		if wasAbandoned {
			gauge.Dec()
		}
		done <- result{v, err}
		if f, _ := ctx.Value(detachedReturnsKey{}).(func()); wasDetached && f != nil {
			f()
		}
	})

	var r result
	select {
	case r = <-done:
	case <-leave:
		mu.Lock()
		if returned {
			mu.Unlock()
			r = <-done
			break
		}
		if pass.Straggle() {
			l.m.straggled.WithLabelValues(c.method).Inc()
		}
		left = true
		pass.Leave()
		mu.Unlock()
		// Nobody waits any more; the deadline still gives the call up,
		// which counts it abandoned (Degraded) if it has not returned.
		go func() {
			<-callCtx.Done()
			mu.Lock()
			timedOut := !returned
			if timedOut {
				abandon()
			}
			mu.Unlock()
			if f, _ := ctx.Value(detachedTimesOutKey{}).(func(error)); timedOut && f != nil && ctx.Err() == nil {
				f(fmt.Errorf("%s: %w after %s", c.method, ErrTimeout, l.opts.Timeout))
			}
		}()
		r.err = fmt.Errorf("%s: %w after %s, far past this method's recent answers", c.method, ErrStillRunning, leaveAfter.Round(time.Millisecond))
	case <-callCtx.Done():
		mu.Lock()
		if returned {
			mu.Unlock()
			r = <-done
			break
		}
		abandon()
		mu.Unlock()
		if ctx.Err() == nil {
			r.err = fmt.Errorf("%s: %w after %s", c.method, ErrTimeout, l.opts.Timeout)
		} else {
			r.err = ctx.Err()
		}
	}
	l.m.duration.WithLabelValues(c.method).Observe(l.opts.Clock.Now().Sub(start).Seconds())
	if r.err != nil {
		l.m.errors.WithLabelValues(c.method).Inc()
		return zero, r.err
	}
	return r.v, nil
}
