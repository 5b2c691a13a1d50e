package cloud

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"
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

// Through the layer: throttles of one object (even repeated) leave the
// family's concurrency alone; throttles of several objects halve it; other
// families keep theirs.
func TestThrottlesAcrossObjectsHalveConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects []string
		want    float64
	}{
		{"one object, three times", []string{"a", "a", "a"}, initialConcurrency},
		{"three objects", []string{"a", "b", "c"}, initialConcurrency / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &scriptedByNode{answer: func(context.Context, *corev1.Node) error {
				// No hint: the object is not held, so each call
				// reaches the cloud.
				return cloudproviderapi.NewRetryError("slow down", 0)
			}}
			l := New(p, Options{})
			inst, _ := l.Instances()
			for _, o := range tc.objects {
				_, _ = inst.InstanceExists(context.Background(), node(o))
			}
			if got := l.families[FamilyInstances].conc.current(); got != tc.want {
				t.Errorf("instances concurrency = %v, want %v", got, tc.want)
			}
			if got := l.families[FamilyLoadBalancers].conc.current(); got != initialConcurrency {
				t.Errorf("load balancer concurrency = %v, want untouched", got)
			}
		})
	}
}

// --cloud-qps is a ceiling only when set: without it nothing caps the
// rate, with it neither the layer nor a recovering family goes above it.
func TestQPSIsACeilingWhenSet(t *testing.T) {
	if got := New(&fake.Cloud{}, Options{}).limiter.Limit(); got != rate.Inf {
		t.Errorf("layer limit without --cloud-qps = %v, want none", got)
	}
	l := New(&fake.Cloud{}, Options{QPS: 20})
	if got := float64(l.limiter.Limit()); got != 20 {
		t.Errorf("layer limit = %v, want 20", got)
	}
	fam := l.families[FamilyRoutes]
	now := time.Now()
	for i := range 3 {
		fam.throttled(now, now, fmt.Sprint(i), l.opts.ThrottleWindow, l.opts.ThrottledObjects)
	}
	recoverFamily(t, fam, now.Add(time.Second), 20)
	for i := range 1000 {
		at := now.Add(time.Minute + time.Duration(i)*10*time.Millisecond)
		fam.sent.add(at)
		fam.succeeded(at)
		if got := float64(fam.rate()); got > 20 {
			t.Fatalf("family rate climbed to %v, above --cloud-qps 20", got)
		}
	}
	if got := float64(fam.rate()); got != 20 {
		t.Errorf("family rate after recovering = %v, want back at 20", got)
	}
}

// After a decrease the cloud's own bucket is still refilling: throttles of
// calls sent within the cooldown do not halve the rate again, later ones do.
func TestRateDecreaseCooldown(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		want  rate.Limit
	}{
		{after: decreaseCooldown / 2, want: 200},
		{after: 2 * decreaseCooldown, want: 100},
	} {
		t.Run(tc.after.String(), func(t *testing.T) {
			l := New(&fake.Cloud{}, Options{QPS: 400})
			fam := l.families[FamilyRoutes]
			now := time.Now()
			episode := func(at time.Time, prefix string) {
				for i := range 3 {
					fam.throttled(at, at, fmt.Sprint(prefix, i), l.opts.ThrottleWindow, l.opts.ThrottledObjects)
				}
			}
			episode(now, "a")
			episode(now.Add(tc.after), "b")
			if got := fam.rate(); got != tc.want {
				t.Errorf("rate after a second episode %s later = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}

// Without --cloud-qps a family probes: from initialRate its rate doubles
// every rateTick while it is used, and when the cloud first throttles
// several objects it drops in one step to what the cloud accepted, even
// far below half of the probe's rate; later throttles while it is busy
// drop it to what the cloud accepted since the last decrease.
func TestProbeFindsTheCloudsRate(t *testing.T) {
	l := New(&fake.Cloud{}, Options{})
	fam := l.families[FamilyInstances]
	start := time.Now()
	// The cloud accepts 100 calls a second; the family sends as fast as
	// its rate allows, each call answered 10 ms later.
	const cloudRate = 100
	var (
		clock  = start
		credit float64
		bucket = float64(cloudRate)
	)
	// tick advances 10 ms and sends the calls the family's rate allows in
	// them; it reports how many the cloud refused and whether the family
	// slowed down (stopping there when asked).
	tick := func(step int, stopOnSlowdown bool) (refused int, slowed bool) {
		clock = clock.Add(10 * time.Millisecond)
		bucket = min(cloudRate, bucket+cloudRate*0.01)
		credit += float64(fam.rate()) * 0.01
		for ; credit >= 1; credit-- {
			fam.sent.add(clock)
			if bucket >= 1 {
				bucket--
				fam.succeeded(clock)
				continue
			}
			refused++
			if s, _ := fam.throttled(clock, clock, fmt.Sprint("n", step, credit), l.opts.ThrottleWindow, l.opts.ThrottledObjects); s {
				slowed = true
				if stopOnSlowdown {
					return refused, slowed
				}
			}
		}
		return refused, slowed
	}
	var (
		slowedAt time.Time
		rates    []rate.Limit
	)
	for step := 0; step < 400 && slowedAt.IsZero(); step++ {
		if _, slowed := tick(step, true); slowed {
			slowedAt = clock
		}
		if step%5 == 4 {
			rates = append(rates, fam.rate())
		}
	}
	if slowedAt.IsZero() {
		t.Fatalf("the family never slowed down; rates every 50 ms: %v", rates)
	}
	if len(rates) < 3 || rates[2] < 1.8*rates[1] {
		t.Errorf("rates every 50 ms while probing = %v, want doubling from %d each 50 ms", rates, initialRate)
	}
	if d := slowedAt.Sub(start); d > time.Second {
		t.Errorf("the probe took %s to find a 100 calls/s cloud", d)
	}
	// Burst plus refill: what the cloud accepted over the last second.
	if got := fam.rate(); got > 2*cloudRate || got < cloudRate/2 {
		t.Errorf("rate after the probe's first throttles = %v, want about the cloud's %d (it accepted that, plus its burst)", got, cloudRate)
	}
	// Ten more seconds of calls: the rate settles at the cloud's, and the
	// cloud never refuses anything like a second's worth of calls.
	refused := map[int]int{}
	for step := range 1000 {
		n, _ := tick(400+step, false)
		refused[step/100] += n
	}
	for sec, n := range refused {
		if n > cloudRate/2 {
			t.Errorf("second %d after the probe: the cloud refused %d calls; refusals per second: %v", sec, n, refused)
		}
	}
	if got := fam.rate(); got < 0.7*cloudRate || got > 1.2*cloudRate {
		t.Errorf("rate after ten seconds = %v, want close to the cloud's %d", got, cloudRate)
	}
}
