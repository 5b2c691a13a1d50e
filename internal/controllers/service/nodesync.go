package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// nodeFanOut is the controller's source of node-driven work. A node change
// that can alter the backends queues, once per window, every Service the
// controller remembers provisioning; each then updates only if its own
// backend set changed, so a burst of joins and leaves costs one
// UpdateLoadBalancer per Service at most.
//
// A round also waits, at most JoinWait, for joining nodes: nodes still
// tainted uninitialized without a providerID, created less than JoinWait
// ago. Upstream counts them as backends at once and updates every load
// balancer again when they get their providerID; waiting makes a burst of
// joins, and the leaves that come with it, one update per load balancer,
// and gives the provider nodes it can resolve.
//
// It watches Nodes through the manager's cache, so the controller waits
// for that cache to sync before its workers start, and its window's timer
// runs under the controller's context, so it ends with the controller.
type nodeFanOut struct {
	nodes     source.SyncingSource
	clock     clock.Clock
	window    time.Duration
	platforms platform.Set
	backends  *backendList
	// services lists the Services to queue: those provisioned.
	services func() []types.NamespacedName
	rounds   *syncRounds
	// changed holds at most one pending node change: the changes of a
	// window all join one round.
	changed chan struct{}

	// joining holds the backend nodes being initialized, by name, with
	// their creation time, kept from the node events: a round waiting for
	// them reads these few instead of listing every node at every change
	// (at 50,000 joining nodes that listing, sorting and hashing took most
	// of a core). joined holds at most one signal that one left the set.
	mu      sync.Mutex
	joining map[string]time.Time
	joined  chan struct{}
}

var _ source.SyncingSource = (*nodeFanOut)(nil)

func newNodeFanOut(c cache.Cache, clk clock.Clock, window time.Duration, platforms platform.Set, backends *backendList,
	services func() []types.NamespacedName, rounds *syncRounds,
) *nodeFanOut {
	f := &nodeFanOut{clock: clk, window: window, platforms: platforms, backends: backends, services: services, rounds: rounds,
		changed: make(chan struct{}, 1), joining: map[string]time.Time{}, joined: make(chan struct{}, 1)}
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	f.nodes = source.Kind(c, &corev1.Node{}, handler.TypedFuncs[*corev1.Node, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*corev1.Node], _ queue) {
			f.track(e.Object)
			f.nodesChanged()
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*corev1.Node], _ queue) {
			f.track(e.ObjectNew)
			f.nodeUpdated(e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*corev1.Node], _ queue) {
			f.untrack(e.Object.GetName())
			f.nodesChanged()
		},
	})
	return f
}

// track records whether node is a joining backend node.
func (f *nodeFanOut) track(node *corev1.Node) {
	if joining(node) && IsBackend(node) && f.platforms.Owns(node) {
		f.mu.Lock()
		f.joining[node.Name] = node.CreationTimestamp.Time
		f.mu.Unlock()
		return
	}
	f.untrack(node.Name)
}

// untrack forgets a node that is no longer joining, and wakes a round
// waiting for it.
func (f *nodeFanOut) untrack(name string) {
	f.mu.Lock()
	_, was := f.joining[name]
	delete(f.joining, name)
	f.mu.Unlock()
	if was {
		select {
		case f.joined <- struct{}{}:
		default:
		}
	}
}

// lastJoinCreated is the creation time of the newest joining node (zero:
// none).
func (f *nodeFanOut) lastJoinCreated() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last time.Time
	for _, created := range f.joining {
		if created.After(last) {
			last = created
		}
	}
	return last
}

// Start watches Nodes and queues node sync rounds into q until ctx ends.
func (f *nodeFanOut) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if err := f.nodes.Start(ctx, q); err != nil {
		return fmt.Errorf("watching nodes: %w", err)
	}
	go f.run(ctx, q)
	return nil
}

// WaitForSync waits for the Node cache.
func (f *nodeFanOut) WaitForSync(ctx context.Context) error {
	if err := f.nodes.WaitForSync(ctx); err != nil {
		return fmt.Errorf("waiting for the node cache: %w", err)
	}
	return nil
}

func (f *nodeFanOut) String() string { return "node fan-out" }

// nodeUpdated starts a round only for a change upstream syncs on (or one
// that moves the node in or out of the platforms this Outrigger serves).
func (f *nodeFanOut) nodeUpdated(old, cur *corev1.Node) {
	switch {
	case shouldSyncUpdatedNode(old, cur), f.platforms.Owns(old) != f.platforms.Owns(cur):
		f.nodesChanged()
	case backendsStale(old, cur):
		// No sync now, but whatever syncs next must see it.
		f.backends.invalidate()
	}
}

// nodesChanged invalidates the backend list and makes sure a round follows.
func (f *nodeFanOut) nodesChanged() {
	f.backends.invalidate()
	select {
	case f.changed <- struct{}{}:
	default: // a round is already pending
	}
}

// run queues one round a window after the first change of each burst.
func (f *nodeFanOut) run(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.changed:
		}
		window := f.clock.NewTimer(f.window)
		select {
		case <-ctx.Done():
			window.Stop()
			return
		case <-window.C():
		}
		// Nothing to update, nothing to wait for: the backend list is
		// listed when a Service needs it.
		if len(f.services()) > 0 && !f.awaitJoining(ctx, f.clock.Now()) {
			return
		}
		// Changes made during the window are part of this round.
		select {
		case <-f.changed:
		default:
		}
		keys := f.services()
		f.rounds.start(keys)
		enqueueLow(q, keys)
	}
}

// enqueueLow queues a node sync round's Services at controller-runtime's
// low priority: a Service created or changed meanwhile (default priority)
// goes before them, so a round of hundreds of backend updates, some of
// them for objects the cloud does not answer for, never makes a new
// Service wait. Requeues keep the low priority.
func enqueueLow(q workqueue.TypedRateLimitingInterface[reconcile.Request], keys []types.NamespacedName) {
	reqs := make([]reconcile.Request, len(keys))
	for i, k := range keys {
		reqs[i] = reconcile.Request{NamespacedName: k}
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, reqs...)
		return
	}
	for _, r := range reqs {
		q.Add(r)
	}
}

// JoinWait bounds how long a node sync round waits for joining nodes to be
// initialized, counted from the end of its window and from each node's
// creation: a node that stays uninitialized holds no round for longer.
const JoinWait = 30 * time.Second

// awaitJoining waits until no backend node is joining (or none created in
// the last JoinWait is), or JoinWait after began; it returns false when
// ctx ended.
func (f *nodeFanOut) awaitJoining(ctx context.Context, began time.Time) bool {
	for {
		until := time.Time{}
		if last := f.lastJoinCreated(); !last.IsZero() {
			until = minTime(last.Add(JoinWait), began.Add(JoinWait))
		}
		wait := until.Sub(f.clock.Now())
		if wait <= 0 {
			return true
		}
		t := f.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-f.joined:
			// A joining node got its providerID or left: look again.
			t.Stop()
		case <-t.C():
		}
	}
}

// joining reports whether node is being initialized by a cloud provider:
// tainted uninitialized, without a providerID yet.
func joining(node *corev1.Node) bool {
	return node.Spec.ProviderID == "" && slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == cloudproviderapi.TaintExternalCloudProvider
	})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// syncRounds times node sync rounds for nodesync_latency_seconds: the
// Services a round queued, and the round each still belongs to.
type syncRounds struct {
	mu      sync.Mutex
	roundOf map[types.NamespacedName]*syncRound
}

// syncRound is one node sync: every load balancer Service queued together
// because nodes changed.
type syncRound struct {
	start   time.Time
	pending int
}

func newSyncRounds() *syncRounds {
	return &syncRounds{roundOf: map[types.NamespacedName]*syncRound{}}
}

// start starts timing a node sync of keys. A Service still pending in an
// earlier round moves to this one: the earlier round is as done as it can
// be.
func (s *syncRounds) start(keys []types.NamespacedName) {
	rd := &syncRound{start: time.Now(), pending: len(keys)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if old := s.roundOf[k]; old != nil {
			old.done()
		}
		s.roundOf[k] = rd
	}
	if len(keys) == 0 {
		// Upstream observes a sync with no Service too.
		nodeSyncLatency.Observe(0)
	}
}

// synced ends key's part in its node sync round, if a reconcile that
// started after the round began has finished with it.
func (s *syncRounds) synced(key types.NamespacedName, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rd := s.roundOf[key]
	if rd == nil || started.Before(rd.start) {
		return
	}
	delete(s.roundOf, key)
	rd.done()
}

func (rd *syncRound) done() {
	rd.pending--
	if rd.pending == 0 {
		nodeSyncLatency.Observe(time.Since(rd.start).Seconds())
	}
}
