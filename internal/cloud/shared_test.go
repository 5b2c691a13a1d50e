package cloud

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/sharing"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
)

// Answers about a node are shared between callers within the window: never
// two calls for one node and question, and a metadata answer also says the
// instance exists. Negative answers and errors are not shared, and nothing
// outlives the window.
func TestAnswersAreSharedWithinTheWindow(t *testing.T) {
	notFound := func(context.Context, *corev1.Node) error { return cloudprovider.InstanceNotFound }
	boom := func(context.Context, *corev1.Node) error { return errors.New("boom") }
	type step struct {
		after time.Duration // since the first call
		ask   sharing.Question
	}
	tests := []struct {
		name      string
		answer    func(context.Context, *corev1.Node) error
		steps     []step
		wantCalls int64
	}{
		{name: "same question twice", answer: answerAll,
			steps: []step{{0, sharing.Metadata}, {time.Second, sharing.Metadata}}, wantCalls: 1},
		{name: "metadata answers exists", answer: answerAll,
			steps: []step{{0, sharing.Metadata}, {time.Second, sharing.Exists}}, wantCalls: 1},
		{name: "shutdown answers exists", answer: answerAll,
			steps: []step{{0, sharing.Shutdown}, {time.Second, sharing.Exists}}, wantCalls: 1},
		{name: "exists does not answer shutdown", answer: answerAll,
			steps: []step{{0, sharing.Exists}, {time.Second, sharing.Shutdown}}, wantCalls: 2},
		{name: "window passed", answer: answerAll,
			steps: []step{{0, sharing.Metadata}, {6 * time.Second, sharing.Metadata}}, wantCalls: 2},
		{name: "not found is asked again", answer: notFound,
			steps: []step{{0, sharing.Metadata}, {time.Second, sharing.Metadata}}, wantCalls: 2},
		{name: "errors are asked again", answer: boom,
			steps: []step{{0, sharing.Exists}, {time.Second, sharing.Exists}}, wantCalls: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			p := &scriptedByNode{answer: func(ctx context.Context, n *corev1.Node) error {
				calls.Add(1)
				return tc.answer(ctx, n)
			}}
			start := time.Now()
			clk := testclock.New(start)
			l := New(p, Options{Clock: clk})
			inst, _ := l.Instances()
			n := node("a")
			for _, s := range tc.steps {
				clk.SetTime(start.Add(s.after))
				switch s.ask {
				case sharing.Exists:
					_, _ = inst.InstanceExists(context.Background(), n)
				case sharing.Shutdown:
					_, _ = inst.InstanceShutdown(context.Background(), n)
				case sharing.Metadata:
					_, _ = inst.InstanceMetadata(context.Background(), n)
				}
			}
			if got := calls.Load(); got != tc.wantCalls {
				t.Errorf("provider calls = %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

// Callers asking the same question about one node at the same moment (the
// node and lifecycle controllers, say) share one call: each either joins
// the call in flight or finds its answer.
func TestConcurrentQuestionsShareOneCall(t *testing.T) {
	const callers = 10
	var calls atomic.Int64
	p := &scriptedByNode{answer: func(context.Context, *corev1.Node) error {
		calls.Add(1)
		return nil
	}}
	inst, _ := New(p, Options{}).Instances()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if _, err := inst.InstanceMetadata(context.Background(), node("a")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if got := calls.Load(); got != 1 {
		t.Errorf("provider calls = %d, want 1 for %d concurrent callers", got, callers)
	}
}

// The metadata a node's initialization got answers the address refresh's
// background lookups of that node within RefreshPeriod, without a call; the
// other nodes, a lookup past the period, and foreground lookups ask the
// cloud.
func TestInitializationAnswersTheRefreshWithinItsPeriod(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	p := &scriptedByNode{answer: func(_ context.Context, n *corev1.Node) error {
		mu.Lock()
		defer mu.Unlock()
		asked[n.Name]++
		return nil
	}}
	start := time.Now()
	clk := testclock.New(start)
	l := New(p, Options{ShareWindow: -1, RefreshPeriod: time.Minute, Clock: clk})
	inst, _ := l.Instances()
	ctx := context.Background()
	if _, err := inst.InstanceMetadata(ctx, node("joined")); err != nil {
		t.Fatal(err)
	}
	nodes := []*corev1.Node{node("joined"), node("other")}
	lookup := func(ctx context.Context, wantJoined, wantOther int) {
		t.Helper()
		for i, st := range inst.Lookup(ctx, nodes, NeedMetadata) {
			if st.Err != nil || !st.Exists || st.Metadata == nil || st.Metadata.ProviderID != "x://"+nodes[i].Name {
				t.Fatalf("status of %s = %+v", nodes[i].Name, st)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if asked["joined"] != wantJoined || asked["other"] != wantOther {
			t.Fatalf("calls by node = %v, want joined %d, other %d", asked, wantJoined, wantOther)
		}
	}
	clk.SetTime(start.Add(30 * time.Second))
	lookup(Background(ctx), 1, 1)
	lookup(ctx, 2, 2)
	clk.SetTime(start.Add(time.Minute + 30*time.Second)) // a period after the initialization
	lookup(Background(ctx), 3, 3)
}
