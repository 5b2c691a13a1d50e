package cloud

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func service(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// lbDouble is a LoadBalancer whose EnsureLoadBalancer answers per Service
// from a function, and which records how many calls reached it for each
// Service and the most it ever had in flight for one.
type lbDouble struct {
	fake.Cloud
	ensure func(ctx context.Context, svc *corev1.Service) error

	mu          sync.Mutex
	calls       map[string]int
	inFlight    map[string]int
	maxInFlight int
}

func newLBDouble(ensure func(context.Context, *corev1.Service) error) *lbDouble {
	return &lbDouble{ensure: ensure, calls: map[string]int{}, inFlight: map[string]int{}}
}

func (d *lbDouble) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return d, true }

func (d *lbDouble) enter(svc *corev1.Service) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[svc.Name]++
	d.inFlight[svc.Name]++
	d.maxInFlight = max(d.maxInFlight, d.inFlight[svc.Name])
	return func() {
		d.mu.Lock()
		d.inFlight[svc.Name]--
		d.mu.Unlock()
	}
}

func (d *lbDouble) callsFor(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[name]
}

func (d *lbDouble) EnsureLoadBalancer(ctx context.Context, _ string, svc *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	defer d.enter(svc)()
	if err := d.ensure(ctx, svc); err != nil {
		return nil, err
	}
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.0.1"}}}, nil
}

func (d *lbDouble) GetLoadBalancer(_ context.Context, _ string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	defer d.enter(svc)()
	return nil, false, nil
}

// A Service the cloud never answers for (the provider honours its context,
// so each call ends at its deadline) is held back after each timeout, for
// the timeout, twice as long after each further one: its retries fail fast
// without reaching the provider, and cost the family no place in its
// concurrency; other Services go on. An answer lifts the hold. (That such
// timeouts do not cut the family's limit while other objects are answered
// is TestTimeoutsOfHungObjectsLeaveTheLimit.) The holds pass on the layer's
// clock, which the test steps; the calls' deadlines are real.
func TestObjectsThatTimeOutAreHeldBack(t *testing.T) {
	var stuck atomic.Bool
	stuck.Store(true)
	d := newLBDouble(func(ctx context.Context, svc *corev1.Service) error {
		if svc.Name == "stuck" && stuck.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	const timeout = 100 * time.Millisecond
	clk := testclock.New(time.Now())
	l := New(d, Options{Timeout: timeout, Clock: clk})
	lb, _ := l.LoadBalancer()
	ctx := context.Background()

	// The provider's own answer at the deadline, or the layer's timeout:
	// whichever comes first.
	timedOut := func(err error) bool { return errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) }
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil); !timedOut(err) {
		t.Fatalf("first call: err = %v, want a timeout", err)
	}
	returned := func() bool { return l.gate.InFlight() == 0 }
	poll.Until(t, 5*time.Second, "the provider to return the timed-out call", returned)
	_, err := lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil)
	hint, ok := provider.RetryAfter(err)
	if !ok || hint <= 0 || hint > timeout {
		t.Fatalf("retry right after the timeout: err = %v (hint %v), want held back for up to %v", err, hint, timeout)
	}
	if got := Reason(err); got != ReasonTimeout {
		t.Errorf("Reason = %q, want %q", got, ReasonTimeout)
	}
	if got := d.callsFor("stuck"); got != 1 {
		t.Errorf("%d calls reached the provider, want 1: the retry was held back", got)
	}
	// Still held a moment before the hold ends, without reaching the
	// provider.
	clk.Step(hint - time.Millisecond)
	_, err = lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil)
	if left, ok := provider.RetryAfter(err); !ok || left != time.Millisecond {
		t.Fatalf("call a millisecond before the hold ends: err = %v (hint %v), want held back for that millisecond", err, left)
	}
	if got := d.callsFor("stuck"); got != 1 {
		t.Errorf("%d calls reached the provider within the hold, want 1", got)
	}
	// Past the hold the next call goes, times out, and the hold doubles.
	clk.Step(time.Millisecond)
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil); !timedOut(err) {
		t.Fatalf("call after the hold: err = %v, want a timeout", err)
	}
	poll.Until(t, 5*time.Second, "the provider to return the timed-out call", returned)
	_, err = lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil)
	if hint, _ = provider.RetryAfter(err); hint <= timeout {
		t.Errorf("hold after the second timeout in a row: %v, want more than %v", hint, timeout)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(name), nil); err != nil {
			t.Errorf("Service %s: %v", name, err)
		}
	}
	// Answered again: no hold.
	stuck.Store(false)
	clk.Step(hint)
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil); err != nil {
		t.Fatalf("once the cloud answers: %v", err)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("stuck"), nil); err != nil {
		t.Errorf("right after an answer: %v, want no hold", err)
	}
}

// An EnsureLoadBalancer that hangs past its timeout keeps its Service's
// slot until it returns: a retry for that Service fails fast without
// reaching the provider (no second load balancer), other Services proceed,
// and once the hung call returns the Service is served again and no slot is
// left behind.
func TestTimedOutCallKeepsItsObjectsSlot(t *testing.T) {
	release := make(chan struct{})
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		if svc.Name == "hung" {
			<-release // ignores ctx, as a badly written provider might
		}
		return nil
	})
	l := New(d, Options{Timeout: 50 * time.Millisecond})
	lb, _ := l.LoadBalancer()
	ctx := context.Background()
	abandonedBefore := value(t, l.m.abandoned.WithLabelValues("EnsureLoadBalancer"))
	rejectedBefore := value(t, l.m.rejected.WithLabelValues("EnsureLoadBalancer"))

	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("hung"), nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("first call: err = %v, want ErrTimeout", err)
	}
	if got := value(t, l.m.abandoned.WithLabelValues("EnsureLoadBalancer")) - abandonedBefore; got != 1 {
		t.Errorf("abandoned calls gauge rose by %v, want 1", got)
	}
	start := time.Now()
	_, err := lb.EnsureLoadBalancer(ctx, "c", service("hung"), nil)
	if !errors.Is(err, ErrCallInFlight) {
		t.Fatalf("retry while the first call runs: err = %v, want ErrCallInFlight", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the refused retry took %s; it must fail fast", d)
	}
	if got := Reason(err); got != ReasonCallInFlight {
		t.Errorf("Reason = %q, want %q", got, ReasonCallInFlight)
	}
	if _, _, err := lb.GetLoadBalancer(ctx, "c", service("hung")); !errors.Is(err, ErrCallInFlight) {
		t.Errorf("another method for the same Service: err = %v, want ErrCallInFlight", err)
	}
	if got := d.callsFor("hung"); got != 1 {
		t.Errorf("%d calls for the hung Service reached the provider, want 1", got)
	}
	if got := value(t, l.m.rejected.WithLabelValues("EnsureLoadBalancer")) - rejectedBefore; got != 1 {
		t.Errorf("in-flight rejections counted %v, want 1", got)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(name), nil); err != nil {
			t.Errorf("Service %s, with no call in flight: %v", name, err)
		}
	}

	close(release)
	poll.Until(t, 5*time.Second, "the hung call's slot to be freed", func() bool { return l.gate.InFlight() == 0 })
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("hung"), nil); err != nil {
		t.Fatalf("after the hung call returned: %v", err)
	}
	if got := d.callsFor("hung"); got != 2 {
		t.Errorf("%d calls for the Service reached the provider, want 2", got)
	}
	if d.maxInFlight != 1 {
		t.Errorf("%d calls for one Service were in flight at once, want 1", d.maxInFlight)
	}
	if n := l.gate.InFlight(); n != 0 {
		t.Errorf("%d slots left held with no call running", n)
	}
	if got := value(t, l.m.abandoned.WithLabelValues("EnsureLoadBalancer")) - abandonedBefore; got != 0 {
		t.Errorf("abandoned calls gauge is %v above where it began after the call returned, want 0", got)
	}
}

// Calls for one object from several callers at once (the node controller
// and the lifecycle controller asking about one node) take turns; none is
// refused, as none was abandoned.
func TestLiveCallsForOneObjectTakeTurns(t *testing.T) {
	var mu sync.Mutex
	inFlight := map[string]int{}
	worst := 0
	p := &scriptedByNode{answer: func(ctx context.Context, n *corev1.Node) error {
		mu.Lock()
		inFlight[n.Name]++
		worst = max(worst, inFlight[n.Name])
		mu.Unlock()
		err := providertest.Latency(time.Millisecond).Wait(ctx)
		mu.Lock()
		inFlight[n.Name]--
		mu.Unlock()
		return err
	}}
	l := New(p, Options{})
	inst, _ := l.Instances()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, err := inst.InstanceMetadata(context.Background(), node(fmt.Sprint("n", i%4))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if worst != 1 {
		t.Errorf("%d calls for one node in flight at once, want 1", worst)
	}
	if n := l.gate.InFlight(); n != 0 {
		t.Errorf("%d slots left held", n)
	}
}

// scriptedByNode is an InstancesV2 whose answers depend on the node.
type scriptedByNode struct {
	fake.Cloud
	answer func(ctx context.Context, n *corev1.Node) error
}

func (s *scriptedByNode) InstancesV2() (cloudprovider.InstancesV2, bool) { return s, true }

func (s *scriptedByNode) InstanceExists(ctx context.Context, n *corev1.Node) (bool, error) {
	return true, s.answer(ctx, n)
}
func (s *scriptedByNode) InstanceShutdown(ctx context.Context, n *corev1.Node) (bool, error) {
	return false, s.answer(ctx, n)
}
func (s *scriptedByNode) InstanceMetadata(ctx context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := s.answer(ctx, n); err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{ProviderID: "x://" + n.Name}, nil
}

// hintedCloud throttles the Service "hot" with a long hint and answers
// everything else at once.
type hintedCloud struct {
	fake.Cloud
	lb   *lbDouble
	inst *scriptedByNode
}

func (h *hintedCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return h.lb, true }
func (h *hintedCloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return h.inst, true }

func answerAll(context.Context, *corev1.Node) error { return nil }

// A retry hint is about the object that got it: that object's calls are
// held back until the hint has passed (the cloud is not asked again
// meanwhile), other Services and instance lookups are not delayed, and no
// family slows down for one object.
func TestRetryHintDelaysOnlyThatObject(t *testing.T) {
	const hint = time.Minute
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		if svc.Name == "hot" {
			return cloudproviderapi.NewRetryError("slow down", hint)
		}
		return nil
	})
	h := &hintedCloud{lb: d, inst: &scriptedByNode{answer: answerAll}}
	l := New(h, Options{QPS: 100, Burst: 10})
	lb, _ := l.LoadBalancer()
	inst, _ := l.Instances()
	// Were anything to wait for the hint, it would hit this deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	for range 5 {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("hot"), nil)
		if after, ok := provider.RetryAfter(err); !ok || after <= 0 || after > hint {
			t.Fatalf("throttled call: err = %v, want a retry hint of at most %s", err, hint)
		}
	}
	d.mu.Lock()
	if got := d.calls["hot"]; got != 1 {
		t.Errorf("the throttled Service's calls reached the cloud %d times within its hint, want 1", got)
	}
	d.mu.Unlock()
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("cold"), nil); err != nil {
		t.Errorf("another Service after a throttle: %v", err)
	}
	if _, err := inst.InstanceMetadata(ctx, node("a")); err != nil {
		t.Errorf("an instance lookup after a load balancer throttle: %v", err)
	}
	for f, fam := range l.gate.All() {
		if got := float64(fam.Rate()); got != 100 {
			t.Errorf("family %s slowed to %v by one object's throttles", f, got)
		}
	}
}

// The periodic loops look nodes up in one pass: a node whose lookup is
// throttled is left for the next pass, and the others are answered without
// waiting for its hint.
func TestLookupAnswersOtherNodesDespiteAHint(t *testing.T) {
	p := &scriptedByNode{answer: func(_ context.Context, n *corev1.Node) error {
		if n.Name == "a" {
			return cloudproviderapi.NewRetryError("slow down", time.Minute)
		}
		return nil
	}}
	inst, _ := New(p, Options{}).Instances()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes := []*corev1.Node{node("a"), node("b"), node("c"), node("d")}
	for _, need := range []Need{NeedMetadata, NeedLiveness} {
		out := inst.Lookup(ctx, nodes, need)
		if _, ok := provider.RetryAfter(out[0].Err); !ok || !out[0].Exists {
			t.Errorf("need %d: throttled node got %+v, want its throttle and never gone", need, out[0])
		}
		for i, st := range out[1:] {
			if st.Err != nil || !st.Exists {
				t.Errorf("need %d: node %s got %+v after another node's throttle", need, nodes[i+1].Name, st)
			}
		}
	}
}

// Throttles across several objects of one family within the window slow
// that family, and only it; throttles spread out in time do not; the family
// recovers with successes.
func TestFamilySlowsDownOnlyForThrottlesAcrossObjects(t *testing.T) {
	tests := []struct {
		name     string
		keys     []string
		spacing  time.Duration
		wantRate float64
	}{
		{name: "one object many times", keys: []string{"a", "a", "a", "a", "a", "a"}, wantRate: 400},
		{name: "two objects", keys: []string{"a", "b", "a", "b"}, wantRate: 400},
		{name: "three objects", keys: []string{"a", "b", "c"}, wantRate: 200},
		{name: "three objects, spread out", keys: []string{"a", "b", "c"}, spacing: 3 * time.Second, wantRate: 400},
		{name: "batch calls count one each", keys: []string{"#1", "#2", "#3"}, wantRate: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(&fake.Cloud{}, Options{QPS: 400, Burst: 400})
			fam := l.gate.Limits(FamilyLoadBalancers)
			now := time.Now()
			for _, k := range tc.keys {
				fam.Throttled(now, now, k, l.opts.ThrottleWindow, l.opts.ThrottledObjects)
				now = now.Add(tc.spacing + time.Millisecond)
			}
			if got := float64(fam.Rate()); got != tc.wantRate {
				t.Errorf("load balancer family rate = %v, want %v", got, tc.wantRate)
			}
			for f, other := range l.gate.All() {
				if f != FamilyLoadBalancers && other.Rate() != 400 {
					t.Errorf("family %s slowed to %v by load balancer throttles", f, other.Rate())
				}
			}
		})
	}
}

// End to end through the layer: load balancer calls for many Services are
// throttled, the load balancer family slows down, instance lookups keep
// their full rate, and the family climbs back to --cloud-qps once the
// cloud accepts calls again.
func TestThrottledFamilyRecovers(t *testing.T) {
	var mu sync.Mutex
	throttling := true
	d := newLBDouble(func(context.Context, *corev1.Service) error {
		mu.Lock()
		defer mu.Unlock()
		if throttling {
			return cloudproviderapi.NewRetryError("slow down", time.Second)
		}
		return nil
	})
	h := &hintedCloud{lb: d, inst: &scriptedByNode{answer: answerAll}}
	l := New(h, Options{QPS: 400, Burst: 400})
	lb, _ := l.LoadBalancer()
	inst, _ := l.Instances()
	ctx := context.Background()
	slowdowns := value(t, l.m.slowdowns.WithLabelValues(string(FamilyLoadBalancers)))
	for i := range 6 {
		_, _ = lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprint("s", i)), nil)
	}
	lbFam := l.gate.Limits(FamilyLoadBalancers)
	if got := float64(lbFam.Rate()); got >= 400 {
		t.Fatalf("load balancer family rate = %v after six Services were throttled, want below 400", got)
	}
	if got := value(t, l.m.slowdowns.WithLabelValues(string(FamilyLoadBalancers))) - slowdowns; got < 1 {
		t.Errorf("slowdowns counted %v, want at least 1", got)
	}
	if got := value(t, l.m.rateLimit.WithLabelValues(string(FamilyLoadBalancers))); got != float64(lbFam.Rate()) {
		t.Errorf("rate gauge = %v, want %v", got, lbFam.Rate())
	}
	if got := float64(l.gate.Limits(FamilyInstances).Rate()); got != 400 {
		t.Errorf("instances family rate = %v, want untouched 400", got)
	}
	for range 5 {
		if _, err := inst.InstanceMetadata(ctx, node("a")); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	throttling = false
	mu.Unlock()
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("fresh"), nil); err != nil {
		t.Fatal(err)
	}
	recoverFamily(t, lbFam, time.Now(), 400)
}

// value reads a counter's or gauge's current value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// Without --cloud-qps there is no ceiling to climb back to: a slowed family
// still recovers, and climbs on while the cloud accepts its calls.
func TestUnlimitedFamilyRecovers(t *testing.T) {
	l := New(&fake.Cloud{}, Options{})
	fam := l.gate.Limits(FamilyRoutes)
	now := time.Now()
	for i := range 3 {
		fam.RecordSent(now)
		fam.Throttled(now, now, fmt.Sprint(i), l.opts.ThrottleWindow, l.opts.ThrottledObjects)
	}
	if fam.Rate() == rate.Inf {
		t.Fatal("an unlimited family did not slow down after throttles of three objects")
	}
	if got := fam.Rate(); got >= admission.InitialRate {
		t.Fatalf("rate after throttles = %v, want below where it started", got)
	}
	// Recovering, it climbs above where it started: nothing holds it
	// below what the cloud accepts for good.
	recoverFamily(t, fam, now.Add(time.Second), 2*admission.InitialRate)
	if got := value(t, l.m.rateLimit.WithLabelValues(string(FamilyRoutes))); got != float64(fam.Rate()) {
		t.Errorf("rate gauge = %v, want %v", got, fam.Rate())
	}
}

// routesDouble throttles creates of one destination and accepts the rest.
type routesDouble struct {
	fake.Cloud
	throttled string
}

func (r *routesDouble) Routes() (cloudprovider.Routes, bool) { return r, true }
func (r *routesDouble) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	return nil, nil
}
func (r *routesDouble) DeleteRoute(context.Context, string, *cloudprovider.Route) error { return nil }
func (r *routesDouble) CreateRoute(_ context.Context, _, _ string, rt *cloudprovider.Route) error {
	if rt.DestinationCIDR == r.throttled {
		return cloudproviderapi.NewRetryError("slow down", time.Minute)
	}
	return nil
}

// A route pass creates routes side by side: one throttled route leaves the
// others' creates undelayed.
func TestThrottledRouteDoesNotDelayOthers(t *testing.T) {
	routes, _ := New(&routesDouble{throttled: "198.18.1.0/24"}, Options{}).Routes()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := routes.CreateRoute(ctx, "c", "", &cloudprovider.Route{TargetNode: "a", DestinationCIDR: "198.18.1.0/24"})
	if _, ok := provider.RetryAfter(err); !ok {
		t.Fatalf("err = %v, want the throttle", err)
	}
	for i := 2; i < 6; i++ {
		rt := &cloudprovider.Route{TargetNode: types.NodeName(fmt.Sprint("n", i)), DestinationCIDR: fmt.Sprintf("198.18.%d.0/24", i)}
		if err := routes.CreateRoute(ctx, "c", "", rt); err != nil {
			t.Errorf("route %s after another route's throttle: %v", rt.DestinationCIDR, err)
		}
	}
	if _, err := routes.ListRoutes(ctx, "c"); err != nil {
		t.Errorf("route list after a route's throttle: %v", err)
	}
}

// TestForegroundCallsGoBeforeBackgroundOnes: when the family's rate is the
// bottleneck, a node being initialized is not queued behind a refresh pass
// that started first; background calls still all get answered.
func TestForegroundCallsGoBeforeBackgroundOnes(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
	)
	first := make(chan struct{}, 1)
	p := &scriptedByNode{answer: func(_ context.Context, n *corev1.Node) error {
		mu.Lock()
		order = append(order, n.Name)
		mu.Unlock()
		select {
		case first <- struct{}{}:
		default:
		}
		return nil
	}}
	inst, _ := New(p, Options{QPS: 20, Burst: 1, ShareWindow: -1}).Instances()
	const background, foreground = 20, 3
	var wg sync.WaitGroup
	bg := Background(context.Background())
	for i := range background {
		wg.Go(func() {
			if _, err := inst.InstanceMetadata(bg, node(fmt.Sprintf("refresh-%02d", i))); err != nil {
				t.Errorf("background call: %v", err)
			}
		})
	}
	<-first
	for i := range foreground {
		wg.Go(func() {
			if _, err := inst.InstanceMetadata(context.Background(), node(fmt.Sprintf("join-%d", i))); err != nil {
				t.Errorf("foreground call: %v", err)
			}
		})
	}
	wg.Wait()
	if len(order) != background+foreground {
		t.Fatalf("%d calls answered, want %d", len(order), background+foreground)
	}
	// At 20 calls/s, background calls that already hold a reservation of
	// at most admission.MaxReservation (5 calls) may still go first; the rest wait.
	last := 0
	for i, name := range order {
		if strings.HasPrefix(name, "join-") {
			last = i
		}
	}
	if limit := 1 + int(admission.MaxReservation/(50*time.Millisecond)) + foreground + 2; last >= limit {
		t.Errorf("the last foreground call was sent %dth, want before the %dth; order: %v", last+1, limit+1, order)
	}
}

// A provider hung for some objects (ignoring its context, as one stuck on a
// dead socket does) costs only those objects: calls given up at their
// deadline give the family's concurrency back, so more hung objects than
// the family's limit do not stop calls for every other object.
func TestHungObjectsDoNotHoldTheFamily(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		if strings.HasPrefix(svc.Name, "hang-") {
			<-release
		}
		return nil
	})
	l := New(d, Options{Timeout: 50 * time.Millisecond})
	lb, _ := l.LoadBalancer()
	hung := 3 * admission.InitialConcurrency
	// Bounded, so that a layer that keeps the family's places fails the
	// test rather than hanging it.
	hungCtx, hungCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hungCancel()
	var wg sync.WaitGroup
	for i := range hung {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := lb.EnsureLoadBalancer(hungCtx, "c", service(fmt.Sprintf("hang-%d", i)), nil); !errors.Is(err, ErrTimeout) {
				t.Errorf("hang-%d: err = %v, want ErrTimeout", i, err)
			}
		}()
	}
	wg.Wait()
	if got := l.Degraded()[FamilyLoadBalancers]; got != int64(hung) {
		t.Errorf("the family reports %d calls abandoned, want %d (degraded from %d)", got, hung, DegradedAbandoned)
	}
	// Each other Service gets its load balancer, well within the time the
	// calls would wait for a place that never comes back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("ok-%d", i)), nil); err != nil {
			t.Fatalf("ok-%d behind %d hung calls: %v", i, hung, err)
		}
	}
}

// A provider still reading its Service after the layer gave up on the call
// reads its own copy: the caller, released at the deadline, writes to its
// object (as the service controller writes the status). The race detector
// (make test runs -race) fails this test when the two share one object:
// nothing orders the provider's read, once the call is given up, before or
// after the caller's writes, and the detector reports such a pair whichever
// ran first, so no overlap in time is needed.
func TestProviderReadsItsOwnCopyAfterTheTimeout(t *testing.T) {
	gaveUp := make(chan struct{})
	written := make(chan struct{})
	done := make(chan struct{})
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		defer close(done)
		<-gaveUp // ignores ctx: still at work after the deadline
		_ = len(svc.Status.LoadBalancer.Ingress) + len(svc.Annotations)
		<-written
		return nil
	})
	l := New(d, Options{Timeout: 50 * time.Millisecond})
	lb, _ := l.LoadBalancer()
	svc := service("slow")
	if _, err := lb.EnsureLoadBalancer(context.Background(), "c", svc, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	close(gaveUp)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.0.1"}}
	svc.Annotations = map[string]string{"n": "1"}
	close(written)
	<-done
}

// Calls hung on some objects cost the others no wait for their timeouts:
// a call far past what its family's answers take gives its place back
// (here the timeout is an hour, so only that can let the others through),
// while its object keeps its slot and no call is abandoned.
func TestStragglersGiveTheirPlaceBack(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var entered, returned atomic.Int32
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		if strings.HasPrefix(svc.Name, "hang-") {
			entered.Add(1)
			<-release
			returned.Add(1)
		}
		return nil
	})
	l := New(d, Options{Timeout: time.Hour})
	lb, _ := l.LoadBalancer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The family learns how long its answers take.
	for i := range 5 {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("warm-%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	hung := 3 * admission.InitialConcurrency
	hungCtx, hungCancel := context.WithCancel(context.Background())
	defer hungCancel()
	limit := l.gate.Limits(admission.FamilyLoadBalancers).ConcurrencyLimit()
	if hung <= limit {
		t.Fatalf("%d hung calls do not fill the family's %d places", hung, limit)
	}
	for i := range hung {
		go func() { _, _ = lb.EnsureLoadBalancer(hungCtx, "c", service(fmt.Sprintf("hang-%d", i)), nil) }()
	}
	// Every place of the family is taken by a hung call before the others
	// are asked for.
	poll.Until(t, 30*time.Second, fmt.Sprintf("%d hung calls to reach the provider", limit), func() bool { return entered.Load() >= int32(limit) })
	for i := range 10 {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("ok-%d", i)), nil); err != nil {
			t.Fatalf("ok-%d behind %d hung calls, with a timeout of an hour: %v", i, hung, err)
		}
	}
	if n := returned.Load(); n != 0 {
		t.Errorf("%d hung calls returned before the others went", n)
	}
	if got := l.Degraded()[FamilyLoadBalancers]; got != 0 {
		t.Errorf("%d calls abandoned: the others went through timeouts, not stragglers", got)
	}
	// The hung objects keep their slots: another call for one is not sent.
	short, shortCancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer shortCancel()
	if _, err := lb.EnsureLoadBalancer(short, "c", service("hang-0"), nil); err == nil {
		t.Error("a second call for a hung object went to the provider")
	}
}

// TestStragglerCallersLeave: a worker waiting on a hung call goes on to
// other objects once the call straggles, with ErrStillRunning, long before
// the timeout; the object keeps its slot (ErrCallInFlight) until the
// provider returns, and the call counts as abandoned only at its deadline.
// Before its family has any answer, a slow call is waited for: a cloud
// whose every answer is slow is not hung.
func TestStragglerCallersLeave(t *testing.T) {
	release := make(chan struct{})
	var slowFirst, failLater atomic.Bool
	slow := providertest.NewHang(t, func(name string) bool { return name == "slow-first" })
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		switch {
		case svc.Name == "slow-first" && slowFirst.CompareAndSwap(false, true):
			slow.Wait(svc.Name)
		case strings.HasPrefix(svc.Name, "hang-"):
			<-release
		case svc.Name == "fails-later" && failLater.CompareAndSwap(false, true):
			<-release
			return errors.New("the cloud said no, late")
		}
		return nil
	})
	ctx := context.Background()
	// The family's first call is slow, past the least straggle time and
	// past the second a caller waits once its family has answers: with
	// nothing to compare it to, its caller waits for its answer. The
	// answer comes 1.5 s later on the layer's clock.
	clk := testclock.New(time.Now())
	firstLayer := New(d, Options{Timeout: time.Hour, Clock: clk})
	first, _ := firstLayer.LoadBalancer()
	firstErr := make(chan error, 1)
	go func() {
		_, err := first.EnsureLoadBalancer(ctx, "c", service("slow-first"), nil)
		firstErr <- err
	}()
	poll.Until(t, 10*time.Second, "the slow first call to reach the provider", func() bool { return slow.Calls() == 1 })
	clk.Step(1500 * time.Millisecond)
	poll.Until(t, 10*time.Second, "the slow first call to straggle", func() bool {
		return firstLayer.gate.Limits(admission.FamilyLoadBalancers).Stragglers() == 1
	})
	// The caller's wait (its leave timer) is still on the clock: it
	// cannot have left.
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d timers on the layer's clock 1.5 s into the first call, want 1: the caller's, not yet run out", n)
	}
	slow.Release()
	if err := <-firstErr; err != nil {
		t.Fatalf("the family's first call, slow: %v", err)
	}
	l := New(d, Options{Timeout: time.Hour})
	lb, _ := l.LoadBalancer()
	for i := range 5 {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("warm-%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	hung := 3 * admission.InitialConcurrency
	errs := make(chan error, hung+1)
	for i := range hung {
		go func() {
			_, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("hang-%d", i)), nil)
			errs <- err
		}()
	}
	go func() {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("fails-later"), nil)
		errs <- err
	}()
	for range hung + 1 {
		if err := <-errs; !errors.Is(err, ErrStillRunning) || Reason(err) != ReasonCallInFlight {
			t.Fatalf("a hung call's caller got %v, want ErrStillRunning (reason %s)", err, ReasonCallInFlight)
		}
	}
	if got := l.Degraded()[FamilyLoadBalancers]; got != 0 {
		t.Errorf("%d calls counted abandoned before their deadline", got)
	}
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("hang-7"), nil); !errors.Is(err, ErrCallInFlight) {
		t.Errorf("a second call for a hung object: err = %v, want ErrCallInFlight", err)
	}
	close(release)
	// A call left running that fails later: the object's next call gets
	// that failure, once, and the one after goes to the provider.
	poll.Until(t, 10*time.Second, "the left call's failure handed to the object's next call", func() bool {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("fails-later"), nil)
		if err != nil && strings.Contains(err.Error(), "the cloud said no, late") {
			return true
		}
		if !errors.Is(err, ErrCallInFlight) {
			t.Fatalf("the next call after a left call failed: %v, want its failure", err)
		}
		return false
	})
	if _, err := lb.EnsureLoadBalancer(ctx, "c", service("fails-later"), nil); err != nil {
		t.Errorf("the call after the left call's failure was reported: %v", err)
	}
	// Once the provider returns, the object's calls go again.
	poll.Until(t, 10*time.Second, "the hung object's calls to go again once the provider returned", func() bool {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("hang-7"), nil)
		if err != nil && !errors.Is(err, ErrCallInFlight) {
			t.Fatalf("after the provider returned: %v", err)
		}
		return err == nil
	})
}

// TestDetachedNodeAnswerIsKept: a node's instance call that its caller left
// (it ran past the straggle time) still answers the node. When the provider
// returns, the caller hears it (WhenDetachedReturns), and the node's next call
// of that method reads the answer without a second call to the provider,
// once; a call of another method meanwhile goes to the provider and leaves
// the kept answer alone. A load balancer call's answer, which depends on
// more than its Service, is not kept.
func TestDetachedNodeAnswerIsKept(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	inst := &scriptedByNode{answer: func(_ context.Context, n *corev1.Node) error {
		calls.Add(1)
		if n.Name == "slow" {
			<-release
		}
		return nil
	}}
	// Nothing shared between callers: every answer below is the kept one
	// or the provider's.
	l := New(inst, Options{Timeout: time.Hour, ShareWindow: -1})
	i, _ := l.Instances()
	returned := make(chan struct{}, 1)
	ctx := WhenDetachedReturns(context.Background(), func() { returned <- struct{}{} })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "slow"}}
	// The metric is the process's: count from what earlier runs left.
	keptBefore := value(t, l.m.keptAnswers.WithLabelValues("InstanceMetadata"))
	if _, err := i.InstanceMetadata(ctx, node); !errors.Is(err, ErrStillRunning) {
		t.Fatalf("a hung node's call: %v, want its caller to leave it (ErrStillRunning)", err)
	}
	close(release)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the caller never heard that the call it left returned")
	}
	if _, err := i.InstanceExists(ctx, node); err != nil {
		t.Fatalf("another method's call after the return: %v", err)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("%d provider calls, want 2 (the left one, then InstanceExists)", got)
	}
	md, err := i.InstanceMetadata(ctx, node)
	if err != nil || md == nil || md.ProviderID != "x://slow" {
		t.Fatalf("the next InstanceMetadata: %+v, %v; want the left call's answer", md, err)
	}
	if got := calls.Load(); got != 2 {
		t.Errorf("%d provider calls, want the kept answer read without a call", got)
	}
	if got := value(t, l.m.keptAnswers.WithLabelValues("InstanceMetadata")) - keptBefore; got != 1 {
		t.Errorf("kept answers counted %v, want 1", got)
	}
	if _, err := i.InstanceMetadata(ctx, node); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 3 {
		t.Errorf("%d provider calls, want the kept answer handed once and the next call sent", got)
	}

	c := call{method: "EnsureLoadBalancer", family: FamilyLoadBalancers, key: "service/ns/a"}
	l.keep(c, &corev1.LoadBalancerStatus{}, nil)
	if _, _, ok := l.takeKept(c); ok {
		t.Error("a load balancer call's answer was kept for the next call")
	}
}

// TestSlowAnswerIsStillRead: a call of a fast family that runs past the
// straggle time but answers within a second gives its place in the family
// back while it runs, yet its caller waits for the answer: leaving would
// cost the object a retry after the answer came. The answer comes 600 ms
// later on the layer's clock.
func TestSlowAnswerIsStillRead(t *testing.T) {
	clk := testclock.New(time.Now())
	slow := providertest.NewHang(t, func(name string) bool { return name == "slow" })
	d := newLBDouble(func(_ context.Context, svc *corev1.Service) error {
		if strings.HasPrefix(svc.Name, "warm-") {
			// A fast answer's round trip on the layer's clock: answers
			// that took no time teach the family nothing.
			clk.Step(time.Millisecond)
		}
		slow.Wait(svc.Name)
		return nil
	})
	l := New(d, Options{Timeout: time.Hour, Clock: clk})
	lb, _ := l.LoadBalancer()
	ctx := context.Background()
	for i := range 5 {
		if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("warm-%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	fam := l.gate.Limits(admission.FamilyLoadBalancers)
	before := fam.Stragglers()
	done := make(chan error, 1)
	go func() {
		_, err := lb.EnsureLoadBalancer(ctx, "c", service("slow"), nil)
		done <- err
	}()
	poll.Until(t, 10*time.Second, "the slow call to reach the provider", func() bool { return slow.Calls() == 1 })
	clk.Step(600 * time.Millisecond)
	poll.Until(t, 10*time.Second, "the slow call to give its place back", func() bool { return fam.Stragglers()-before == 1 })
	// The caller's wait (its leave timer) is still on the clock: it
	// cannot have left.
	if n := clk.Waiters(); n != 1 {
		t.Fatalf("%d timers on the layer's clock 600 ms into the call, want 1: the caller's, not yet run out", n)
	}
	slow.Release()
	if err := <-done; err != nil {
		t.Fatalf("a slow answer within a second: %v, want it read", err)
	}
	if got := fam.Stragglers() - before; got != 1 {
		t.Errorf("%d stragglers, want the slow call's place given back while it ran", got)
	}
}

// How long a caller waits for a call before it goes on without it: a call
// about no one object is waited for to the end; a call about one, at least
// a second, two before its family has any answer (a slow cloud's first
// answers are not taken for hung ones); a relisted call, whose outcome its
// caller reads from a later list, and a kept one, whose answer waits for
// its object's next call, as soon as it straggles.
func TestLeaveAfter(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		key                    string
		answered, relist, kept bool
		want                   time.Duration
		ok                     bool
	}{
		{"about no one object", "", true, false, false, 0, false},
		{"before any answer", "k", false, false, false, 2 * time.Second, true},
		{"after fast answers", "k", true, false, false, time.Second, true},
		{"relisted, before any answer", "k", false, true, false, 125 * time.Millisecond, true},
		{"relisted, after fast answers", "k", true, true, false, 125 * time.Millisecond, true},
		{"kept, before any answer", "k", false, false, true, 125 * time.Millisecond, true},
		{"kept, after fast answers", "k", true, false, true, 125 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(newLBDouble(func(context.Context, *corev1.Service) error { return nil }), Options{Timeout: time.Hour})
			ctx := context.Background()
			if tc.answered {
				lb, _ := l.LoadBalancer()
				for i := range 5 {
					if _, err := lb.EnsureLoadBalancer(ctx, "c", service(fmt.Sprintf("warm-%d", i)), nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			if tc.relist {
				ctx = Relisted(ctx)
			}
			pass, err := l.gate.Admit(ctx, admission.Call{Method: "EnsureLoadBalancer", Family: FamilyLoadBalancers, Key: tc.key, Kept: tc.kept})
			if err != nil {
				t.Fatal(err)
			}
			defer pass.Returned(klog.Background(), nil, false)
			if got, ok := pass.LeaveAfter(); got != tc.want || ok != tc.ok {
				t.Errorf("LeaveAfter() = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestNoTimeout: with NoTimeout a call has no deadline and is waited for
// however long it takes, as under upstream's cloud-controller-manager (a
// load balancer call of OCI or OpenStack waits minutes on the cloud's work
// requests); the default deadline cuts the same call.
func TestNoTimeout(t *testing.T) {
	const took = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		wantErr bool
	}{
		{"no deadline", NoTimeout, false},
		{"deadline shorter than the call", 100 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hadDeadline atomic.Bool
			d := newLBDouble(func(ctx context.Context, _ *corev1.Service) error {
				_, ok := ctx.Deadline()
				hadDeadline.Store(ok)
				select {
				case <-time.After(took):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			lb, _ := New(d, Options{Timeout: tc.timeout}).LoadBalancer()
			_, err := lb.EnsureLoadBalancer(context.Background(), "c", service("slow"), nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("EnsureLoadBalancer: %v, want error %v", err, tc.wantErr)
			}
			if hadDeadline.Load() != (tc.timeout > 0) {
				t.Errorf("the call's context had a deadline: %v", hadDeadline.Load())
			}
		})
	}
}
