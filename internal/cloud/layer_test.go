package cloud

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// scripted is an InstancesV2 whose calls answer from a function.
type scripted struct {
	fake.Cloud
	calls  atomic.Int64
	answer func(ctx context.Context, n int64) error
}

func (s *scripted) InstancesV2() (cloudprovider.InstancesV2, bool) { return s, true }
func (s *scripted) InstanceExists(ctx context.Context, _ *corev1.Node) (bool, error) {
	err := s.answer(ctx, s.calls.Add(1))
	return err == nil, err
}
func (s *scripted) InstanceShutdown(ctx context.Context, _ *corev1.Node) (bool, error) {
	return false, s.answer(ctx, s.calls.Add(1))
}
func (s *scripted) InstanceMetadata(ctx context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := s.answer(ctx, s.calls.Add(1)); err != nil {
		return nil, err
	}
	return &cloudprovider.InstanceMetadata{ProviderID: "x://" + n.Name}, nil
}

func TestTimeoutFreesCallerOfHungProvider(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	p := &scripted{answer: func(ctx context.Context, n int64) error {
		<-release // ignores ctx, as a badly written provider might
		return nil
	}}
	inst, _ := New(p, Options{Timeout: 100 * time.Millisecond}).Instances()
	start := time.Now()
	_, err := inst.InstanceMetadata(context.Background(), node("a"))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("caller held %s by a hung provider", d)
	}
}

func TestRateLimit(t *testing.T) {
	p := &scripted{answer: func(context.Context, int64) error { return nil }}
	inst, _ := New(p, Options{QPS: 20, Burst: 1, ShareWindow: -1}).Instances()
	start := time.Now()
	for range 6 {
		if _, err := inst.InstanceExists(context.Background(), node("a")); err != nil {
			t.Fatal(err)
		}
	}
	// 1 burst + 5 at 20/s: at least 250ms.
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("6 calls at 20 QPS took %s", d)
	}
}

func TestLookupNeverReportsGoneOnError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		answer     func(context.Context, int64) error
		need       Need
		wantExists bool
		wantErr    bool
	}{
		{"metadata found", func(context.Context, int64) error { return nil }, NeedMetadata, true, false},
		{"metadata not found", func(context.Context, int64) error { return cloudprovider.InstanceNotFound }, NeedMetadata, false, false},
		{"metadata error", func(context.Context, int64) error { return boom }, NeedMetadata, true, true},
		{"liveness error", func(context.Context, int64) error { return boom }, NeedLiveness, true, true},
		{"liveness throttled", func(context.Context, int64) error { return cloudproviderapi.NewRetryError("x", time.Millisecond) }, NeedLiveness, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inst, _ := New(&scripted{answer: tc.answer}, Options{}).Instances()
			st := inst.Lookup(context.Background(), []*corev1.Node{node("a")}, tc.need)[0]
			if st.Exists != tc.wantExists || (st.Err != nil) != tc.wantErr {
				t.Errorf("got exists=%t err=%v, want exists=%t err=%t", st.Exists, st.Err, tc.wantExists, tc.wantErr)
			}
		})
	}
	t.Run("canceled lookup", func(t *testing.T) {
		inst, _ := New(&scripted{answer: func(context.Context, int64) error { return nil }}, Options{}).Instances()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, st := range inst.Lookup(ctx, []*corev1.Node{node("a"), node("b")}, NeedLiveness) {
			if !st.Exists {
				t.Error("a node reported gone by a lookup that never ran")
			}
		}
	})
}

// batchProvider answers InstancesStatus and counts batch calls.
type batchProvider struct {
	scripted
	batches atomic.Int64
	fail    bool
}

func (b *batchProvider) InstancesV2() (cloudprovider.InstancesV2, bool) { return b, true }
func (b *batchProvider) InstancesStatus(_ context.Context, nodes []*corev1.Node) ([]provider.InstanceStatus, error) {
	b.batches.Add(1)
	if b.fail {
		return nil, errors.New("outage")
	}
	out := make([]provider.InstanceStatus, len(nodes))
	for i := range nodes {
		out[i] = provider.InstanceStatus{Exists: i%2 == 0}
	}
	return out, nil
}

func TestLookupBatches(t *testing.T) {
	nodes := make([]*corev1.Node, 1234)
	for i := range nodes {
		nodes[i] = node("n")
	}
	b := &batchProvider{}
	inst, _ := New(b, Options{}).Instances()
	if !inst.SupportsBatch() {
		t.Fatal("batch provider not detected")
	}
	out := inst.Lookup(context.Background(), nodes, NeedLiveness)
	if got := b.batches.Load(); got != 3 {
		t.Errorf("%d batch calls for %d nodes, want 3", got, len(nodes))
	}
	if b.calls.Load() != 0 {
		t.Errorf("%d per-node calls alongside batch calls", b.calls.Load())
	}
	if out[provider.MaxBatch].Exists != true || out[provider.MaxBatch+1].Exists != false {
		t.Error("statuses not mapped back to their nodes")
	}

	b.fail = true
	for _, st := range inst.Lookup(context.Background(), nodes[:10], NeedLiveness) {
		if !st.Exists || st.Err == nil {
			t.Fatalf("failed batch gave %+v, want an error and never gone", st)
		}
	}
}

// TestNoBatchAsksNodeByNode: with the BatchInstanceLookups gate off, a
// batch-capable provider is asked as a standard one is.
func TestNoBatchAsksNodeByNode(t *testing.T) {
	b := &batchProvider{scripted: scripted{answer: func(context.Context, int64) error { return nil }}}
	inst, _ := New(b, Options{NoBatch: true}).Instances()
	if inst.SupportsBatch() {
		t.Fatal("NoBatch still batches")
	}
	inst.Lookup(context.Background(), []*corev1.Node{node("a"), node("b")}, NeedLiveness)
	if b.batches.Load() != 0 || b.calls.Load() == 0 {
		t.Errorf("%d batch calls and %d per-node calls, want none and some", b.batches.Load(), b.calls.Load())
	}
}

// throttleEpisode makes one InstanceExists call for each of objects
// distinct nodes, each answered by the provider as its script says.
func throttleEpisode(inst *Instances, prefix string, objects int) {
	for i := range objects {
		_, _ = inst.InstanceExists(context.Background(), node(fmt.Sprintf("%s-%d", prefix, i)))
	}
}

func TestRateAdaptsToThrottling(t *testing.T) {
	var throttle atomic.Bool
	throttle.Store(true)
	p := &scripted{answer: func(context.Context, int64) error {
		if throttle.Load() {
			return cloudproviderapi.NewRetryError("slow down", 0)
		}
		return nil
	}}
	// Episodes a few seconds apart, past the cooldown after each decrease.
	clk := testclock.New(time.Now())
	l := New(p, Options{QPS: 400, Burst: 400, ShareWindow: -1, Clock: clk})
	inst, _ := l.Instances()
	fam := l.gate.Limits(FamilyInstances)
	var rates []float64
	for ep := range 3 {
		clk.Step(3 * time.Second)
		throttleEpisode(inst, fmt.Sprint("ep", ep), 3)
		rates = append(rates, float64(fam.Rate()))
	}
	if rates[0] != 200 || rates[1] != 100 || rates[2] != 50 {
		t.Errorf("rates after throttle episodes = %v, want halving from 400: 200, 100, 50", rates)
	}
	if got := float64(l.gate.QPS()); got != 400 {
		t.Errorf("the layer-wide limit moved to %v; only the family may slow down", got)
	}
	throttle.Store(false)
	if _, err := inst.InstanceExists(context.Background(), node("a")); err != nil {
		t.Fatal(err)
	}
	if steps := recoverFamily(t, fam, clk.Now().Add(time.Second), 400); steps == 0 {
		t.Error("rate did not climb after the cloud accepted calls again")
	}
}

// Twenty calls in flight together, all throttled, are one episode: the
// rate halves once, not twenty times down to the floor.
func TestBurstOfThrottlesHalvesOnce(t *testing.T) {
	const inFlight = 20
	var started sync.WaitGroup
	started.Add(inFlight)
	release := make(chan struct{})
	p := &scripted{answer: func(context.Context, int64) error {
		started.Done()
		<-release
		return cloudproviderapi.NewRetryError("slow down", 0)
	}}
	l := New(p, Options{QPS: 400, Burst: 400})
	// All of them in flight at once, above the initial concurrency.
	l.gate.Limits(FamilyInstances).SetConcurrency(inFlight)
	inst, _ := l.Instances()
	var done sync.WaitGroup
	for i := range inFlight {
		done.Go(func() {
			_, _ = inst.InstanceExists(context.Background(), node(fmt.Sprint("n", i)))
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	if got := float64(l.gate.Limits(FamilyInstances).Rate()); got != 200 {
		t.Errorf("rate after one burst of %d throttles = %v, want 200 (halved once)", inFlight, got)
	}
}

// The cloud accepts most of a burst and throttles the rest: the rate drops
// to what it accepted (less a 3% margin), not to half of what was asked;
// when it accepted little, the rate halves (a family that sent little
// accepted little).
func TestThrottleDropsRateToWhatTheCloudAccepted(t *testing.T) {
	for _, tc := range []struct {
		accepted int64
		want     float64
	}{
		{accepted: 300, want: 291},
		{accepted: 3, want: 200},
	} {
		t.Run(fmt.Sprint(tc.accepted), func(t *testing.T) {
			p := &scripted{answer: func(_ context.Context, n int64) error {
				if n <= tc.accepted {
					return nil
				}
				return cloudproviderapi.NewRetryError("slow down", 0)
			}}
			l := New(p, Options{QPS: 400, Burst: 400, ShareWindow: -1})
			inst, _ := l.Instances()
			for range tc.accepted {
				if _, err := inst.InstanceExists(context.Background(), node("a")); err != nil {
					t.Fatal(err)
				}
			}
			throttleEpisode(inst, "x", 3)
			if got := float64(l.gate.Limits(FamilyInstances).Rate()); got != tc.want {
				t.Errorf("rate after the cloud accepted %d calls then throttled = %v, want %v", tc.accepted, got, tc.want)
			}
		})
	}
}

// recoverFamily has the cloud accept fam's calls, as many as its rate
// allows, over a simulated clock from start, until its rate is back at want; it reports
// how many calls that took and fails the test if it does not get there
// within ten simulated minutes.
func recoverFamily(t *testing.T, fam *admission.Limits, start time.Time, want rate.Limit) int {
	t.Helper()
	for i := 0; ; i++ {
		if fam.Rate() >= want {
			return i
		}
		if i > 60000 {
			t.Fatalf("rate still %v after %d simulated successes, want %v", fam.Rate(), i, want)
		}
		now := start.Add(time.Duration(i) * 10 * time.Millisecond)
		for range int(fam.Rate()/100) + 1 {
			fam.RecordSent(now)
		}
		fam.Succeeded(now)
	}
}
