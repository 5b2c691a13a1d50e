package service

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A node sync round's Services wait behind a Service created meanwhile.
func TestNodeSyncRoundsGoAfterServiceChanges(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	enqueueLow(q, []types.NamespacedName{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}})
	created := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "new"}}
	q.Add(created)

	first, prio, _ := q.GetWithPriority()
	if first != created {
		t.Errorf("first item %v (priority %d), want the new Service", first, prio)
	}
	for range 2 {
		item, prio, _ := q.GetWithPriority()
		if prio != handler.LowPriority {
			t.Errorf("node sync item %v has priority %d, want %d", item, prio, handler.LowPriority)
		}
	}
}
