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
		ask   question
	}
	tests := []struct {
		name      string
		answer    func(context.Context, *corev1.Node) error
		steps     []step
		wantCalls int64
	}{
		{name: "same question twice", answer: answerAll,
			steps: []step{{0, askMetadata}, {time.Second, askMetadata}}, wantCalls: 1},
		{name: "metadata answers exists", answer: answerAll,
			steps: []step{{0, askMetadata}, {time.Second, askExists}}, wantCalls: 1},
		{name: "shutdown answers exists", answer: answerAll,
			steps: []step{{0, askShutdown}, {time.Second, askExists}}, wantCalls: 1},
		{name: "exists does not answer shutdown", answer: answerAll,
			steps: []step{{0, askExists}, {time.Second, askShutdown}}, wantCalls: 2},
		{name: "window passed", answer: answerAll,
			steps: []step{{0, askMetadata}, {6 * time.Second, askMetadata}}, wantCalls: 2},
		{name: "not found is asked again", answer: notFound,
			steps: []step{{0, askMetadata}, {time.Second, askMetadata}}, wantCalls: 2},
		{name: "errors are asked again", answer: boom,
			steps: []step{{0, askExists}, {time.Second, askExists}}, wantCalls: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			p := &scriptedByNode{answer: func(ctx context.Context, n *corev1.Node) error {
				calls.Add(1)
				return tc.answer(ctx, n)
			}}
			l := New(p, Options{})
			start := time.Now()
			var now atomic.Int64
			l.now = func() time.Time { return start.Add(time.Duration(now.Load())) }
			l.answers.now = l.now
			inst, _ := l.Instances()
			n := node("a")
			for _, s := range tc.steps {
				now.Store(int64(s.after))
				switch s.ask {
				case askExists:
					_, _ = inst.InstanceExists(context.Background(), n)
				case askShutdown:
					_, _ = inst.InstanceShutdown(context.Background(), n)
				case askMetadata:
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
