package service

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/outrigger-ccm/outrigger/internal/platform"
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

// A round waits for the joining nodes the node events told of, without
// listing nodes, and goes on once the last one got its providerID.
func TestRoundWaitsForJoiningNodesWithoutListing(t *testing.T) {
	lists := 0
	backends := newBackendList(func(context.Context) ([]*corev1.Node, error) {
		lists++
		return nil, nil
	}, platform.Set{})
	f := &nodeFanOut{clock: clock.RealClock{}, backends: backends, joining: map[string]time.Time{}, joined: make(chan struct{}, 1)}
	tainted := func(name, providerID string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()},
			Spec: corev1.NodeSpec{ProviderID: providerID, Taints: []corev1.Taint{
				{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		}
	}
	f.track(tainted("ready", "fake://ready"))
	f.track(tainted("a", ""))
	f.track(tainted("b", ""))

	done := make(chan bool, 1)
	go func() { done <- f.awaitJoining(context.Background(), time.Now()) }()
	f.track(tainted("a", "fake://a"))
	select {
	case <-done:
		t.Fatal("the round went on with node b still joining")
	case <-time.After(100 * time.Millisecond):
	}
	f.track(tainted("b", "fake://b"))
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("awaitJoining returned false")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the round still waits after the last joining node got its providerID")
	}
	if lists != 0 {
		t.Errorf("waiting listed the nodes %d times", lists)
	}
}
