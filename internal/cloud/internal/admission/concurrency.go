package admission

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// InitialConcurrency is where a family's adaptive concurrency limit
// starts: what a family may have in flight before the cloud has answered
// anything. The family's rate (InitialRate, a fifth of a second's burst)
// bounds how fast those go out; objects hung from the start hold no more
// than this many places until their calls straggle.
const InitialConcurrency = 32

// Bounds of a family's adaptive concurrency limit.
const (
	minConcurrency = 2
	maxConcurrency = 1024
	// latencyWindow is how long the lowest latency seen stays the
	// baseline; after it a new baseline is learned, so a cloud that got
	// slower for good is not read as congested forever.
	latencyWindow = 30 * time.Second
	// latencySlack is how much above twice the baseline a call may take
	// before the family reads the cloud as congested: small absolute
	// differences (a fast local provider, scheduling noise on a busy
	// machine) say nothing.
	latencySlack = 50 * time.Millisecond
)

// concurrency is one method family's adaptive limit on calls in flight, in
// the manner of TCP congestion control: it starts small and doubles every
// round trip (slow start) until the first sign of congestion, then grows by
// one call per round trip (additive increase) and shrinks by a factor on
// congestion (multiplicative decrease): halved when the cloud throttles
// calls for several objects or a call times out while no call sent after
// it was answered, and by a tenth when latency rises well above the
// baseline. Calls sent before a decrease do not trigger another one, so a
// burst of bad answers decreases once. A timeout while later calls are
// answered is the object's, not the cloud's (a provider hung on some
// objects): it leaves the limit alone, so hung objects cost only
// themselves.
type concurrency struct {
	mu        sync.Mutex
	limit     float64
	slowStart bool
	inFlight  int
	waiters   []chan struct{}
	// ahead is how many of waiters, at their front, are acquireAhead's.
	ahead int
	// baseline is the lowest latency seen since baselineAt (within
	// latencyWindow).
	baseline, nextBaseline time.Duration
	// smoothed is a moving average of recent latencies: one slow answer on
	// a busy machine says nothing, a run of them does.
	smoothed     time.Duration
	baselineAt   time.Time
	lastDecrease time.Time
	// lastAnswered is when the latest-sent call that was answered was
	// sent.
	lastAnswered time.Time
	gauge        prometheus.Gauge
}

func newConcurrency(gauge prometheus.Gauge) *concurrency {
	c := &concurrency{limit: InitialConcurrency, slowStart: true, gauge: gauge}
	gauge.Set(c.limit)
	return c
}

// acquire waits until a call may go, within ctx, behind the calls already
// waiting.
func (c *concurrency) acquire(ctx context.Context) error { return c.wait(ctx, false) }

// acquireAhead is acquire for a call about the whole family (a list): it
// goes ahead of the waiting calls about one object, and may take one place
// beyond the limit, since every object of the family waits on it (a route
// pass lists before it creates, while the places may all be held by calls
// about to straggle) and there is seldom more than one. The family never
// has more than one call beyond its limit in flight.
func (c *concurrency) acquireAhead(ctx context.Context) error { return c.wait(ctx, true) }

// places is how many calls may be in flight when the next waiter (ahead:
// an acquireAhead's) goes. c.mu held.
func (c *concurrency) places(ahead bool) int {
	if ahead {
		return int(c.limit) + 1
	}
	return int(c.limit)
}

func (c *concurrency) wait(ctx context.Context, ahead bool) error {
	c.mu.Lock()
	queued := len(c.waiters)
	if ahead {
		queued = c.ahead
	}
	if c.inFlight < c.places(ahead) && queued == 0 {
		c.inFlight++
		c.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	if ahead {
		c.waiters = slices.Insert(c.waiters, c.ahead, w)
		c.ahead++
	} else {
		c.waiters = append(c.waiters, w)
	}
	c.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				if i < c.ahead {
					c.ahead--
				}
				return ctx.Err()
			}
		}
		// Woken meanwhile: the call's place is ours to give back.
		c.inFlight--
		c.wake()
		return ctx.Err()
	}
}

// release ends a call; wake lets waiters in up to the limit. c.mu held.
func (c *concurrency) wake() {
	for len(c.waiters) > 0 && c.inFlight < c.places(c.ahead > 0) {
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		if c.ahead > 0 {
			c.ahead--
		}
		c.inFlight++
		close(w)
	}
}

// done ends a call that was sent at sent and took latency, and adapts the
// limit: congested says the cloud throttled calls for several objects.
// A call that failed for another reason ends without adapting.
func (c *concurrency) done(now, sent time.Time, latency time.Duration, outcome callOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	c.adapt(now, sent, latency, outcome)
}

// release gives a call's place back without adapting the limit: a
// straggler's (see straggleAfter), whose outcome adapts it later, if at all.
func (c *concurrency) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	// In slow start, before the cloud has shown any congestion, a
	// straggler grows the limit as an answer would: calls hung on many
	// objects would otherwise let the family probe for capacity only as
	// fast as they straggle.
	if c.slowStart {
		c.increase()
		c.gauge.Set(float64(int(c.limit)))
	}
	c.wake()
}

// stragglerAnswered adapts the limit to the answer of a straggler, whose
// place was given back while it ran, unless a call sent after it was
// answered first: then its slowness was its object's, not the cloud's (as
// for a timeout). A cloud slow for every call is read from its stragglers
// too: its latency rises, and calls straggle later.
func (c *concurrency) stragglerAnswered(now, sent time.Time, latency time.Duration, outcome callOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if outcome == outcomeOK && c.lastAnswered.After(sent) {
		return
	}
	c.adapt(now, sent, latency, outcome)
}

// adaptOnly adapts the limit to the outcome of a call whose place was
// released already.
func (c *concurrency) adaptOnly(now, sent time.Time, latency time.Duration, outcome callOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.adapt(now, sent, latency, outcome)
}

// Bounds of straggleAfter.
const (
	// minStraggle: below it a call is never a straggler, whatever the
	// family's latency (a fast cloud's answers of a few milliseconds say
	// little about one that takes a tenth of a second). A straggler only
	// gives its place back, which costs at most a few more calls in flight
	// than the limit (the family's rate still bounds them), and only
	// before the family's first answers or in a family that fast; its
	// caller waits longer (minLeave) unless leaving costs nothing (a
	// relisted or kept call), since otherwise it costs the object a retry.
	minStraggle = 125 * time.Millisecond
	// straggleFactor: how many times the family's usual latency a call
	// runs before it is a straggler.
	straggleFactor = 8
)

// straggleAfter is how long a call runs before it is a straggler, far past
// what the family's answers take (straggleFactor times their moving
// average, at least minStraggle; minStraggle before any answer): it gives
// its place in the family's concurrency back then, long before its
// timeout, so that calls hung on some objects do not keep the others
// waiting in turns of a timeout. Its
// object keeps its slot until the provider returns. ok is false when that
// is not before timeout: a family whose answers take that long is left to
// its timeout, as before.
func (c *concurrency) straggleAfter(timeout time.Duration) (d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d = max(minStraggle, straggleFactor*c.smoothed)
	return d, timeout <= 0 || d < timeout
}

// hasAnswers reports whether the family's latency has been learnt from
// answers.
func (c *concurrency) hasAnswers() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.smoothed > 0
}

// adapt is done's adaptation. c.mu held.
func (c *concurrency) adapt(now, sent time.Time, latency time.Duration, outcome callOutcome) {
	switch outcome {
	case outcomeOK:
		if sent.After(c.lastAnswered) {
			c.lastAnswered = sent
		}
		if c.slow(now, latency) {
			c.decrease(now, sent, 0.9)
		} else {
			c.increase()
		}
	case outcomeCongested:
		c.decrease(now, sent, 0.5)
	case outcomeTimedOut:
		if !c.lastAnswered.After(sent) {
			c.decrease(now, sent, 0.5)
		}
	}
	c.gauge.Set(float64(int(c.limit)))
	c.wake()
}

type callOutcome int

const (
	outcomeOK        callOutcome = iota
	outcomeCongested             // throttles across objects
	outcomeTimedOut              // no answer within the timeout
	outcomeOther                 // an error that says nothing about load
)

// slow reports whether recent latencies (a moving average over about ten
// answers) are well above the baseline, and learns both. c.mu held.
func (c *concurrency) slow(now time.Time, latency time.Duration) bool {
	if c.baselineAt.IsZero() || now.Sub(c.baselineAt) > latencyWindow {
		// A fresh window: the lowest of the last one is the baseline
		// until this one has seen lower.
		if c.nextBaseline > 0 {
			c.baseline = c.nextBaseline
		}
		c.nextBaseline, c.baselineAt = latency, now
	}
	if latency < c.nextBaseline {
		c.nextBaseline = latency
	}
	if c.smoothed == 0 {
		c.smoothed = latency
	} else {
		c.smoothed = (9*c.smoothed + latency) / 10
	}
	if c.baseline == 0 || latency < c.baseline {
		c.baseline = latency
	}
	return c.smoothed > 2*c.baseline+latencySlack
}

// increase: one more call per round trip, or double per round trip in slow
// start (each answered call adds 1/limit, or 1). c.mu held.
func (c *concurrency) increase() {
	if c.slowStart {
		c.limit++
	} else {
		c.limit += 1 / c.limit
	}
	c.limit = min(c.limit, maxConcurrency)
}

// decrease multiplies the limit by factor, once per episode. c.mu held.
func (c *concurrency) decrease(now, sent time.Time, factor float64) {
	if sent.Before(c.lastDecrease) {
		return
	}
	c.lastDecrease = now
	c.slowStart = false
	c.limit = max(minConcurrency, c.limit*factor)
}

// current is the limit, for tests and the gauge.
func (c *concurrency) current() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit
}
