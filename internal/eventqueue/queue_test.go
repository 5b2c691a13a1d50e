package eventqueue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

// sink is an Event sink that writes nothing until released, as an API
// server far behind the Events would.
type sink struct {
	release chan struct{}
	once    sync.Once
	written atomic.Int64
}

func (s *sink) Create(e *corev1.Event) (*corev1.Event, error) {
	<-s.release
	s.written.Add(1)
	return e, nil
}

func (s *sink) Update(e *corev1.Event) (*corev1.Event, error) { return s.Create(e) }

func (s *sink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return s.Create(e) }

// A storm of Events while the sink is stuck: every Event is either written
// once the sink moves again or counted as dropped, none lost silently in
// client-go's broadcaster.
func TestEveryEventWrittenOrCounted(t *testing.T) {
	const storm = 3 * Capacity
	const reason = "StormTest"
	before := testutil.ToFloat64(dropped.WithLabelValues("", reason))

	q, b := New(scheme.Scheme, "")
	s := &sink{release: make(chan struct{})}
	w := b.StartRecordingToSink(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	t.Cleanup(func() {
		s.once.Do(func() { close(s.release) })
		cancel()
		<-done
		w.Stop()
		b.Shutdown()
	})

	r := q.Recorder(corev1.EventSource{Component: "test"})
	for i := range storm {
		// Each Event about its own node, so that client-go's spam filter
		// and aggregation, which work per object, keep every one.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n-%d", i), UID: "u"}}
		r.Eventf(node, corev1.EventTypeNormal, reason, "event %d", i)
	}
	s.once.Do(func() { close(s.release) })

	var written, lost float64
	for deadline := time.Now().Add(30 * time.Second); ; {
		written, lost = float64(s.written.Load()), testutil.ToFloat64(dropped.WithLabelValues("", reason))-before
		if written+lost == storm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v Events written and %v counted as dropped, of %d recorded", written, lost, storm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lost == 0 {
		t.Errorf("none of %d Events dropped while the sink was stuck; the test did not make a storm", storm)
	}
	if written < Capacity {
		t.Errorf("only %v Events written; the queue and the broadcaster hold %d each", written, Capacity)
	}
}
