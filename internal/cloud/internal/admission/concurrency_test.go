package admission

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func testConcurrency(limit float64, slowStart bool) *concurrency {
	c := newConcurrency(prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"}))
	c.limit, c.slowStart = limit, slowStart
	return c
}

// respond runs one call through c: acquired, then done with outcome.
func respond(t *testing.T, c *concurrency, now time.Time, latency time.Duration, outcome callOutcome) {
	t.Helper()
	if err := c.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.done(now.Add(latency), now, latency, outcome)
}

// Each rule of the adaptive concurrency limit, answer by answer.
func TestConcurrencyRules(t *testing.T) {
	base := time.Now()
	const rtt = 20 * time.Millisecond
	tests := []struct {
		name      string
		limit     float64
		slowStart bool
		// answers are (latency, outcome) pairs, each sent after the one
		// before returned.
		answers []callOutcome
		latency []time.Duration // per answer; rtt when nil
		want    float64
	}{
		{name: "slow start doubles per round trip", limit: 8, slowStart: true,
			answers: repeat(outcomeOK, 8), want: 16},
		{name: "additive increase: one call per round trip", limit: 8,
			answers: repeat(outcomeOK, 8), want: 9},
		{name: "throttles across objects halve", limit: 16, slowStart: true,
			answers: []callOutcome{outcomeCongested}, want: 8},
		{name: "never below two", limit: 2,
			answers: []callOutcome{outcomeCongested, outcomeCongested}, want: 2},
		{name: "a timeout with no later answer halves", limit: 16,
			answers: []callOutcome{outcomeTimedOut}, want: 8},
		{name: "an error that says nothing about load changes nothing", limit: 8,
			answers: repeat(outcomeOther, 5), want: 8},
		{name: "one slow answer is no congestion", limit: 16,
			answers: repeat(outcomeOK, 3), latency: []time.Duration{rtt, 10 * rtt, rtt}, want: 16.2},
		{name: "latency within the slack is no congestion", limit: 16,
			answers: repeat(outcomeOK, 30), latency: slices.Repeat([]time.Duration{2*rtt + latencySlack}, 30), want: 17.8},
		{name: "rising latency takes a tenth off per round trip", limit: 16,
			answers: repeat(outcomeOK, 11), latency: append([]time.Duration{rtt}, slices.Repeat([]time.Duration{4*rtt + 2*latencySlack}, 10)...), want: 9.67},
		{name: "ceiling", limit: maxConcurrency - 1, slowStart: true,
			answers: repeat(outcomeOK, 10), want: maxConcurrency},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testConcurrency(tc.limit, tc.slowStart)
			now := base
			for i, o := range tc.answers {
				lat := rtt
				if tc.latency != nil {
					lat = tc.latency[i]
				}
				now = now.Add(time.Millisecond)
				respond(t, c, now, lat, o)
				now = now.Add(lat)
			}
			if got := c.current(); math.Abs(got-tc.want) > 0.1 {
				t.Errorf("limit = %v, want %v", got, tc.want)
			}
		})
	}
}

func repeat(o callOutcome, n int) []callOutcome {
	out := make([]callOutcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// Calls that were in flight together when the cloud pushed back are one
// episode: the limit is cut once, not once per call.
func TestConcurrencyDecreasesOncePerEpisode(t *testing.T) {
	c := testConcurrency(32, false)
	sent := time.Now()
	for range 10 {
		if err := c.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		c.done(sent.Add(time.Second+time.Duration(i)), sent, time.Second, outcomeCongested)
	}
	if got := c.current(); got != 16 {
		t.Errorf("limit after one burst of congested answers = %v, want 16", got)
	}
}

// A timeout is the cloud's congestion only when nothing sent after the
// call was answered: timeouts of a provider hung on some objects, while
// calls for other objects sent after them are answered, leave the limit
// alone; timeouts of a cloud that answers nothing halve it.
func TestTimeoutsOfHungObjectsLeaveTheLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		// answeredAfter: a call sent after the hung ones is answered
		// before their timeouts.
		answeredAfter bool
		want          float64
	}{
		{"others answered meanwhile", true, 32.25},
		{"nothing answered", false, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConcurrency(32, false)
			hungSent := time.Now()
			for range 8 {
				if err := c.acquire(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.answeredAfter {
				for i := range 8 {
					respond(t, c, hungSent.Add(time.Duration(i+1)*time.Millisecond), time.Millisecond, outcomeOK)
				}
			}
			deadline := hungSent.Add(5 * time.Second)
			for range 8 {
				c.done(deadline, hungSent, 5*time.Second, outcomeTimedOut)
			}
			if got := math.Round(c.current()*100) / 100; got != tc.want {
				t.Errorf("limit = %v, want %v", got, tc.want)
			}
		})
	}
}

// At the limit a call waits; it goes as soon as one returns, and gives up
// with its context.
func TestConcurrencyLimitHoldsCalls(t *testing.T) {
	c := testConcurrency(2, false)
	ctx := context.Background()
	for range 2 {
		if err := c.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.acquire(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire at the limit with a cancelled context = %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- c.acquire(ctx) }()
	now := time.Now()
	c.done(now, now, 0, outcomeOther)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight != 2 {
		t.Errorf("in flight = %d, want 2", c.inFlight)
	}
}

// A list takes one place beyond the limit, and no more: a second one waits,
// ahead of the calls about one object already waiting (every object waits
// on a list); a cancelled one leaves the order of the others as it was.
func TestListsWaitAheadOfObjectCalls(t *testing.T) {
	c := testConcurrency(1, false)
	ctx := context.Background()
	if err := c.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.acquireAhead(ctx); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 4)
	waiting := func(n int) {
		t.Helper()
		for {
			c.mu.Lock()
			got := len(c.waiters)
			c.mu.Unlock()
			if got == n {
				return
			}
			runtime.Gosched()
		}
	}
	start := func(ctx context.Context, name string, acquire func(context.Context) error) {
		go func() {
			if err := acquire(ctx); err != nil {
				order <- name + ": " + err.Error()
				return
			}
			order <- name
		}()
	}
	start(ctx, "object 1", c.acquire)
	waiting(1)
	start(ctx, "object 2", c.acquire)
	waiting(2)
	start(ctx, "list 2", c.acquireAhead)
	waiting(3)
	cancelled, cancel := context.WithCancel(ctx)
	start(cancelled, "list 3", c.acquireAhead)
	waiting(4)
	cancel()
	if got := <-order; got != "list 3: context canceled" {
		t.Fatalf("first out: %q, want the cancelled list", got)
	}
	done := func() {
		now := time.Now()
		c.done(now, now, 0, outcomeOther)
	}
	// Two in flight (the limit and the list's place beyond it): one ends,
	// and the waiting list takes the place beyond the limit again.
	done()
	if got := <-order; got != "list 2" {
		t.Fatalf("admitted %q, want the waiting list first", got)
	}
	// One ends: one in flight, the limit, so the objects still wait.
	done()
	c.mu.Lock()
	waiters := len(c.waiters)
	c.mu.Unlock()
	if waiters != 2 {
		t.Errorf("%d waiting, want both objects (the limit is full)", waiters)
	}
	var got []string
	for range 2 {
		done()
		got = append(got, <-order)
	}
	if want := []string{"object 1", "object 2"}; !slices.Equal(got, want) {
		t.Errorf("admitted in order %v, want %v", got, want)
	}
}

// A call is a straggler far past what its family's answers take, never
// before a quarter of a second, and never when that is not before its
// timeout (a family that slow is left to its timeouts).
func TestStraggleAfter(t *testing.T) {
	for _, tc := range []struct {
		smoothed, timeout time.Duration
		want              time.Duration
		ok                bool
	}{
		{0, 30 * time.Second, 125 * time.Millisecond, true},
		{10 * time.Millisecond, 30 * time.Second, 125 * time.Millisecond, true},
		{20 * time.Millisecond, 30 * time.Second, 160 * time.Millisecond, true},
		{100 * time.Millisecond, 30 * time.Second, 800 * time.Millisecond, true},
		{500 * time.Millisecond, 30 * time.Second, 4 * time.Second, true},
		{5 * time.Second, 30 * time.Second, 40 * time.Second, false},
		{20 * time.Millisecond, 160 * time.Millisecond, 160 * time.Millisecond, false},
		{20 * time.Millisecond, 0, 160 * time.Millisecond, true},
	} {
		c := newConcurrency(prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}))
		c.smoothed = tc.smoothed
		if got, ok := c.straggleAfter(tc.timeout); got != tc.want || ok != tc.ok {
			t.Errorf("smoothed %v, timeout %v: %v, %v; want %v, %v", tc.smoothed, tc.timeout, got, ok, tc.want, tc.ok)
		}
	}
}

// A straggler gives its place back; in slow start it also grows the limit
// as an answer would, and after congestion it does not.
func TestStragglerReleaseGrowsOnlyInSlowStart(t *testing.T) {
	for _, tc := range []struct {
		slowStart bool
		want      float64
	}{{true, 9}, {false, 8}} {
		c := testConcurrency(8, tc.slowStart)
		if err := c.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.release()
		if got := c.current(); got != tc.want {
			t.Errorf("slow start %v: limit %v after a straggler, want %v", tc.slowStart, got, tc.want)
		}
		c.mu.Lock()
		inFlight := c.inFlight
		c.mu.Unlock()
		if inFlight != 0 {
			t.Errorf("slow start %v: %d in flight after the straggler gave its place back", tc.slowStart, inFlight)
		}
	}
}
