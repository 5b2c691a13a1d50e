// Package eventqueue puts a bounded queue of Outrigger's own in front of
// client-go's Event broadcaster, so that Events lost in a storm are
// counted.
//
// client-go's broadcaster keeps up to 1,000 Events for its sink and, when
// the sink (the API server, at --event-qps) falls behind, drops the rest
// without a trace: its distribution to a full watcher just moves on. Here
// every Event waits in a queue of the same size, and is handed to the
// broadcaster only while fewer than that are between the broadcaster and
// its sink; so the broadcaster never drops, and an Event that finds the
// queue full is dropped here and counted in outrigger_events_dropped_total.
package eventqueue

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Capacity is how many Events wait for the broadcaster, and how many may
// be in the broadcaster at once: client-go's own queue length.
const Capacity = 1000

// dropped counts the Events dropped because Capacity were waiting, by
// tenant (each tenant cluster of tenant mode has its queue; "" for a single
// cluster) and reason, in controller-runtime's registry, which the manager
// serves.
var dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "outrigger_events_dropped_total",
	Help: "Events not recorded because " + fmt.Sprint(Capacity) + " were already waiting to be written (an Event storm faster than --event-qps), by tenant and reason.",
}, []string{"tenant", "reason"})

// ForgetTenant deletes tenant's series once its queue is no longer used
// (the tenant stopped on this replica).
func ForgetTenant(tenant string) {
	dropped.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
}

func init() { metrics.Registry.MustRegister(dropped) }

// event is one Event, its object already resolved to a reference: the
// object may change once the recorder's caller returns.
type event struct {
	recorder    record.EventRecorder
	ref         *corev1.ObjectReference
	annotations map[string]string
	eventtype   string
	reason      string
	message     string
}

// Queue holds Events for one broadcaster. Make it with New; record with
// the recorders of Recorder; run it with Run.
type Queue struct {
	broadcaster record.EventBroadcaster
	scheme      *runtime.Scheme
	// tenant labels the dropped Events' count.
	tenant string

	mu   sync.Mutex
	cond *sync.Cond
	// waiting are the Events not yet handed to the broadcaster.
	waiting []event
	// handed and taken count Events handed to the broadcaster and taken by
	// its sink; their difference is what the broadcaster holds.
	handed, taken uint64
	stopped       bool
}

// New returns a queue in front of a broadcaster made with Options. Its
// sink must be started with StartRecordingToSink on that broadcaster.
func New(scheme *runtime.Scheme, tenant string) (*Queue, record.EventBroadcaster) {
	q := &Queue{scheme: scheme, tenant: tenant}
	q.cond = sync.NewCond(&q.mu)
	// The correlator calls its key function once for every Event the sink
	// takes, whether it is then written, folded into another or skipped as
	// spam: that is the count of Events that left the broadcaster.
	q.broadcaster = record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{
		KeyFunc: func(e *corev1.Event) (string, string) {
			q.mu.Lock()
			q.taken++
			q.mu.Unlock()
			q.cond.Broadcast()
			return record.EventAggregatorByReasonFunc(e)
		},
	}))
	return q, q.broadcaster
}

// Recorder returns a recorder for source whose Events go through the queue.
func (q *Queue) Recorder(source corev1.EventSource) record.EventRecorder {
	return &recorder{q: q, inner: q.broadcaster.NewRecorder(q.scheme, source)}
}

// Run hands waiting Events to the broadcaster until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.stopped = true
		q.mu.Unlock()
		q.cond.Broadcast()
	})
	defer stop()
	for {
		q.mu.Lock()
		for !q.stopped && (len(q.waiting) == 0 || q.handed-q.taken >= Capacity) {
			q.cond.Wait()
		}
		if q.stopped {
			q.mu.Unlock()
			return
		}
		e := q.waiting[0]
		q.waiting[0] = event{}
		q.waiting = q.waiting[1:]
		q.handed++
		q.mu.Unlock()
		e.recorder.AnnotatedEventf(e.ref, e.annotations, e.eventtype, e.reason, "%s", e.message)
	}
}

// add queues e, or drops and counts it when Capacity are waiting.
func (q *Queue) add(e event) {
	q.mu.Lock()
	full := len(q.waiting) >= Capacity
	if !full {
		q.waiting = append(q.waiting, e)
	}
	q.mu.Unlock()
	if full {
		dropped.WithLabelValues(q.tenant, e.reason).Inc()
		return
	}
	q.cond.Broadcast()
}

// recorder is a record.EventRecorder whose Events wait in the queue.
type recorder struct {
	q     *Queue
	inner record.EventRecorder
}

func (r *recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.AnnotatedEventf(object, nil, eventtype, reason, "%s", message)
}

func (r *recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.AnnotatedEventf(object, nil, eventtype, reason, messageFmt, args...)
}

func (r *recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	ref, err := reference.GetReference(r.q.scheme, object)
	if err != nil {
		klog.Background().Error(err, "Could not construct reference, will not report event", "eventType", eventtype, "reason", reason)
		return
	}
	r.q.add(event{recorder: r.inner, ref: ref, annotations: annotations, eventtype: eventtype, reason: reason, message: fmt.Sprintf(messageFmt, args...)})
}
