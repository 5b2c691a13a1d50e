package cloud

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
)

// Through the layer: throttles of one object (even repeated) leave the
// family's concurrency alone; throttles of several objects halve it; other
// families keep theirs.
func TestThrottlesAcrossObjectsHalveConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name    string
		objects []string
		want    float64
	}{
		{"one object, three times", []string{"a", "a", "a"}, admission.InitialConcurrency},
		{"three objects", []string{"a", "b", "c"}, admission.InitialConcurrency / 2},
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
			if got := l.gate.Limits(FamilyInstances).Concurrency(); got != tc.want {
				t.Errorf("instances concurrency = %v, want %v", got, tc.want)
			}
			if got := l.gate.Limits(FamilyLoadBalancers).Concurrency(); got != admission.InitialConcurrency {
				t.Errorf("load balancer concurrency = %v, want untouched", got)
			}
		})
	}
}

// --cloud-qps is a ceiling only when set: without it nothing caps the
// rate, with it neither the layer nor a recovering family goes above it.
func TestQPSIsACeilingWhenSet(t *testing.T) {
	if got := New(&fake.Cloud{}, Options{}).gate.QPS(); got != rate.Inf {
		t.Errorf("layer limit without --cloud-qps = %v, want none", got)
	}
	l := New(&fake.Cloud{}, Options{QPS: 20})
	if got := float64(l.gate.QPS()); got != 20 {
		t.Errorf("layer limit = %v, want 20", got)
	}
	fam := l.gate.Limits(FamilyRoutes)
	now := time.Now()
	for i := range 3 {
		fam.Throttled(now, now, fmt.Sprint(i), l.opts.ThrottleWindow, l.opts.ThrottledObjects)
	}
	recoverFamily(t, fam, now.Add(time.Second), 20)
	for i := range 1000 {
		at := now.Add(time.Minute + time.Duration(i)*10*time.Millisecond)
		fam.RecordSent(at)
		fam.Succeeded(at)
		if got := float64(fam.Rate()); got > 20 {
			t.Fatalf("family rate climbed to %v, above --cloud-qps 20", got)
		}
	}
	if got := float64(fam.Rate()); got != 20 {
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
		{after: admission.DecreaseCooldown / 2, want: 200},
		{after: 2 * admission.DecreaseCooldown, want: 100},
	} {
		t.Run(tc.after.String(), func(t *testing.T) {
			l := New(&fake.Cloud{}, Options{QPS: 400})
			fam := l.gate.Limits(FamilyRoutes)
			now := time.Now()
			episode := func(at time.Time, prefix string) {
				for i := range 3 {
					fam.Throttled(at, at, fmt.Sprint(prefix, i), l.opts.ThrottleWindow, l.opts.ThrottledObjects)
				}
			}
			episode(now, "a")
			episode(now.Add(tc.after), "b")
			if got := fam.Rate(); got != tc.want {
				t.Errorf("rate after a second episode %s later = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}

// Without --cloud-qps a family probes: from admission.InitialRate its rate doubles
// every rateTick while it is used, and when the cloud first throttles
// several objects it drops in one step to what the cloud accepted, even
// far below half of the probe's rate; later throttles while it is busy
// drop it to what the cloud accepted since the last decrease.
func TestProbeFindsTheCloudsRate(t *testing.T) {
	l := New(&fake.Cloud{}, Options{})
	fam := l.gate.Limits(FamilyInstances)
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
	acceptedCalls := 0
	tick := func(step int, stopOnSlowdown bool) (refused int, slowed bool) {
		clock = clock.Add(10 * time.Millisecond)
		bucket = min(cloudRate, bucket+cloudRate*0.01)
		credit += float64(fam.Rate()) * 0.01
		for ; credit >= 1; credit-- {
			fam.RecordSent(clock)
			if bucket >= 1 {
				bucket--
				acceptedCalls++
				fam.Succeeded(clock)
				continue
			}
			refused++
			if s, _ := fam.Throttled(clock, clock, fmt.Sprint("n", step, credit), l.opts.ThrottleWindow, l.opts.ThrottledObjects); s {
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
			rates = append(rates, fam.Rate())
		}
	}
	if slowedAt.IsZero() {
		t.Fatalf("the family never slowed down; rates every 50 ms: %v", rates)
	}
	if len(rates) < 3 || rates[2] < 1.8*rates[1] {
		t.Errorf("rates every 50 ms while probing = %v, want doubling from %d each 50 ms", rates, admission.InitialRate)
	}
	if d := slowedAt.Sub(start); d > time.Second {
		t.Errorf("the probe took %s to find a 100 calls/s cloud", d)
	}
	// Burst plus refill: what the cloud accepted over the last second.
	if got := fam.Rate(); got > 2*cloudRate || got < cloudRate/2 {
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
	if got := fam.Rate(); got < 0.7*cloudRate || got > 1.2*cloudRate {
		t.Errorf("rate after ten seconds = %v, want close to the cloud's %d", got, cloudRate)
	}
	// A minute at the limit: the family keeps the cloud's whole rate and,
	// probing just over it, has under 1% of its calls refused.
	accepted0, refusedMinute := acceptedCalls, 0
	for step := range 6000 {
		n, _ := tick(1400+step, false)
		refusedMinute += n
	}
	accepted := acceptedCalls - accepted0
	if accepted < 60*cloudRate*95/100 {
		t.Errorf("a minute at the limit: the cloud accepted %d calls, want at least 95%% of the %d it allows", accepted, 60*cloudRate)
	}
	share := float64(refusedMinute) / float64(accepted+refusedMinute)
	t.Logf("a minute at the limit: %d calls accepted, %d refused (%.1f%%)", accepted, refusedMinute, 100*share)
	if share >= 0.01 {
		t.Errorf("a minute at the limit: the cloud refused %d of %d calls (%.1f%%), want under 1%%", refusedMinute, accepted+refusedMinute, 100*share)
	}
}
