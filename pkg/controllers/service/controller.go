// Package service is the service-lb-controller: a cloud load balancer for
// every Service of type LoadBalancer this Outrigger owns, with on-cluster
// state identical to upstream's (the finalizer
// service.kubernetes.io/load-balancer-cleanup, status.loadBalancer, the
// Event reasons) so a cluster can move between CCMs without recreating a
// load balancer.
//
// Beyond upstream:
//   - --load-balancer-class makes Outrigger own one class, so several CCMs
//     can share a cluster;
//   - node changes are coalesced: a burst of joins and leaves becomes one
//     UpdateLoadBalancer per Service per window, and only when that
//     Service's backend set really changed;
//   - a status condition (LoadBalancerReady=False) says why a load
//     balancer is pending or failing, and is removed once it is provisioned;
//   - many workers (--concurrent-service-syncs), all under the cloud-call
//     layer's rate limit.
package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/retryhint"
	"github.com/outrigger-ccm/outrigger/pkg/platform"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "service-lb-controller"

// EventComponent is the source of the Events the controller records:
// upstream's, not the --controllers name, so that tooling filtering Events by
// source sees the same thing with either CCM.
const EventComponent = "service-controller"

// Finalizer is upstream's: a Service carrying it has (or may have) a cloud
// load balancer that must be deleted before the Service goes.
const Finalizer = "service.kubernetes.io/load-balancer-cleanup"

// ConditionLoadBalancerReady is set to False, with a reason and a message,
// while a Service's load balancer is pending or failing, and removed once
// it is provisioned.
const ConditionLoadBalancerReady = "LoadBalancerReady"

// Event reasons and types are upstream's, for the same situations.
const (
	EventEnsuring     = "EnsuringLoadBalancer"     // Normal, before every EnsureLoadBalancer
	EventEnsured      = "EnsuredLoadBalancer"      // Normal
	EventSyncFailed   = "SyncLoadBalancerFailed"   // Warning: ensuring, or cleaning up through the finalizer, failed
	EventUpdated      = "UpdatedLoadBalancer"      // Normal: backends updated
	EventUpdateFailed = "UpdateLoadBalancerFailed" // Warning
	EventDeleting     = "DeletingLoadBalancer"     // Normal, only when the load balancer exists
	EventDeleted      = "DeletedLoadBalancer"      // Normal
	// EventDeleteFailed is for a Service gone without the finalizer (or
	// recreated under the same name), whose old load balancer is deleted
	// from memory; a failure through the finalizer is EventSyncFailed.
	EventDeleteFailed = "DeleteLoadBalancerFailed" // Warning
	EventNoNodes      = "UnAvailableLoadBalancer"  // Warning: no backend node
)

// Condition reasons of Outrigger's own (the cloud's come from cloud.Reason).
const (
	ConditionReasonNodes = "NoNodes"
	// ConditionReasonProvisioning is the condition's reason while the first
	// EnsureLoadBalancer is under way.
	ConditionReasonProvisioning = "Provisioning"
)

// errNilStatus is a provider's EnsureLoadBalancer answering neither a status
// nor an error; upstream counts that as a failed sync and leaves the
// Service's status alone.
var errNilStatus = errors.New("the provider's EnsureLoadBalancer returned no status")

// Options configure the controller.
type Options struct {
	LoadBalancer cloudprovider.LoadBalancer
	ClusterName  string
	// Class, when set, is the spec.loadBalancerClass this Outrigger owns;
	// empty means Services without a class, as upstream.
	Class string
	// Workers is --concurrent-service-syncs.
	Workers int
	// NodeSyncWindow is how long node changes are gathered before the
	// affected Services are updated. Default 1s.
	NodeSyncWindow time.Duration
	// Platforms are the nodes this Outrigger serves: only they are
	// backends of its load balancers.
	Platforms platform.Set
	// OrphanSweepPeriod is how often load balancers whose Service no
	// longer exists are looked for (and the grace before one is deleted),
	// with a provider that records ownership; 0 turns the sweep off.
	OrphanSweepPeriod time.Duration
	// Provider names the provider when an Outrigger runs several: the
	// controller's name and the source of its Events end in "/Provider".
	// Empty (one provider): upstream's names.
	Provider string
}

// applied is what the controller last made the cloud do for one Service.
type applied struct {
	service *corev1.Service // a copy, to delete the LB if the Service vanishes unseen
	spec    string
	nodes   backendSet
	status  corev1.LoadBalancerStatus
	// elsewhere: the provider answered cloudprovider.ImplementedElsewhere,
	// so another component makes this load balancer and owns the status.
	elsewhere bool
}

type reconciler struct {
	client   client.Client
	recorder record.EventRecorder
	opts     Options

	mu      sync.Mutex
	applied map[types.NamespacedName]applied
	// notOurs holds the UIDs of Services of another class found to have
	// no load balancer of ours: their class can only become ours again
	// by a change that makes owns() true, so the cloud is asked once.
	notOurs map[types.UID]bool

	// Backend nodes are listed once per change, not once per Service.
	nodeGen     atomic.Uint64
	nodesMu     sync.Mutex
	nodesAt     uint64
	nodes       []*corev1.Node
	nodesFP     backendSet
	syncPending atomic.Bool
	// queue is the controller's work queue, for nodeSync's fan-out.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]

	// rounds times node syncs for nodesync_latency_seconds: the Services a
	// node change queued, and the round each still belongs to.
	roundsMu sync.Mutex
	roundOf  map[types.NamespacedName]*nodeSyncRound
}

// nodeSyncRound is one node sync: every load balancer Service queued
// together because nodes changed.
type nodeSyncRound struct {
	start   time.Time
	pending int
}

// Setup adds the controller to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.LoadBalancer == nil {
		return errors.New("service-lb-controller needs a provider with LoadBalancer")
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.NodeSyncWindow <= 0 {
		opts.NodeSyncWindow = time.Second
	}
	name, component := Name, EventComponent
	if opts.Provider != "" {
		name, component = name+"/"+opts.Provider, component+"/"+opts.Provider
	}
	r := &reconciler{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorderFor(component), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
		applied:  map[types.NamespacedName]applied{},
		notOurs:  map[types.UID]bool{},
		roundOf:  map[types.NamespacedName]*nodeSyncRound{},
	}
	r.nodeGen.Store(1)
	nodes := handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.nodesChanged(q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, cur := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
			switch {
			case shouldSyncUpdatedNode(old, cur), opts.Platforms.Owns(old) != opts.Platforms.Owns(cur):
				r.nodesChanged(q)
			case backendsStale(old, cur):
				// No sync now, but whatever syncs next must see it.
				r.nodeGen.Add(1)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.nodesChanged(q)
		},
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		// As upstream, only a change a load balancer is built from, or one
		// that calls for cleanup, is a reason to run; our own writes
		// (finalizer, status) are not.
		For(&corev1.Service{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return needsSync(e.ObjectOld.(*corev1.Service), e.ObjectNew.(*corev1.Service))
		}})).
		Watches(&corev1.Node{}, nodes).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: opts.Workers,
			// Upstream retries a failed Service after 5s, up to 5m.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Complete(retryhint.Requeue(r))
	if err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	if owners, ok := opts.LoadBalancer.(provider.LoadBalancerOwnership); ok && opts.OrphanSweepPeriod > 0 {
		sweep := &orphanSweep{client: mgr.GetClient(), owners: owners, lb: opts.LoadBalancer, recorder: r.recorder,
			cluster: opts.ClusterName, class: opts.Class, period: opts.OrphanSweepPeriod, seen: map[string]time.Time{}, now: time.Now}
		if err := mgr.Add(sweep); err != nil {
			return fmt.Errorf("setting up %s orphan sweep: %w", Name, err)
		}
	}
	return nil
}

// needsSync is upstream's test for a Service update: something a load
// balancer is built from changed, or the Service wants its load balancer
// gone and still carries the finalizer.
func needsSync(old, cur *corev1.Service) bool {
	return old.Spec.Type != cur.Spec.Type ||
		old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() ||
		specFingerprint(old) != specFingerprint(cur) ||
		(slices.Contains(cur.Finalizers, Finalizer) && !wantsLoadBalancer(cur))
}

// owns reports whether svc is this Outrigger's to provision: its class is
// ours. A Service no longer of type LoadBalancer has lost its class (the
// API server clears it), so it is ours to clean up when we own the default
// class, as upstream, or when we remember provisioning it.
func (r *reconciler) owns(svc *corev1.Service) bool {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		if r.opts.Class == "" {
			return svc.Spec.LoadBalancerClass == nil
		}
		return svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == r.opts.Class
	}
	if r.opts.Class == "" {
		return true
	}
	_, ok := r.lastApplied(client.ObjectKeyFromObject(svc))
	return ok
}

func wantsLoadBalancer(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil
}

// nodeSyncRequest is the work queue's item for a node sync round: no
// Service has an empty name.
var nodeSyncRequest = reconcile.Request{}

// nodesChanged invalidates the backend list and, once per window, queues
// a node sync round (nodeSync); each Service then updates only if its own
// backend set changed. The window's timer is the work queue's own
// (AddAfter), so it ends with the queue.
func (r *reconciler) nodesChanged(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.nodeGen.Add(1)
	if !r.syncPending.CompareAndSwap(false, true) {
		return
	}
	r.queue.Store(&q)
	q.AddAfter(nodeSyncRequest, r.opts.NodeSyncWindow)
}

// nodeSync queues every load balancer Service for a node sync round.
func (r *reconciler) nodeSync() {
	r.syncPending.Store(false)
	q := r.queue.Load()
	if q == nil {
		return
	}
	r.mu.Lock()
	keys := make([]types.NamespacedName, 0, len(r.applied))
	for k := range r.applied {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	r.startRound(keys)
	for _, k := range keys {
		(*q).Add(reconcile.Request{NamespacedName: k})
	}
}

// startRound starts timing a node sync of keys. A Service still pending in
// an earlier round moves to this one: the earlier round is as done as it
// can be.
func (r *reconciler) startRound(keys []types.NamespacedName) {
	rd := &nodeSyncRound{start: time.Now(), pending: len(keys)}
	r.roundsMu.Lock()
	defer r.roundsMu.Unlock()
	for _, k := range keys {
		if old := r.roundOf[k]; old != nil {
			old.done()
		}
		r.roundOf[k] = rd
	}
	if len(keys) == 0 {
		// Upstream observes a sync with no Service too.
		nodeSyncLatency.Observe(0)
	}
}

// synced ends key's part in its node sync round, if a reconcile that
// started after the round began has finished with it.
func (r *reconciler) synced(key types.NamespacedName, started time.Time) {
	r.roundsMu.Lock()
	defer r.roundsMu.Unlock()
	rd := r.roundOf[key]
	if rd == nil || started.Before(rd.start) {
		return
	}
	delete(r.roundOf, key)
	rd.done()
}

func (rd *nodeSyncRound) done() {
	rd.pending--
	if rd.pending == 0 {
		nodeSyncLatency.Observe(time.Since(rd.start).Seconds())
	}
}

// backends returns the backend nodes, sorted by name, and their fingerprint.
// The slice is shared: callers and providers must not modify it.
func (r *reconciler) backends(ctx context.Context) ([]*corev1.Node, backendSet, error) {
	gen := r.nodeGen.Load()
	r.nodesMu.Lock()
	defer r.nodesMu.Unlock()
	if r.nodesAt == gen {
		return r.nodes, r.nodesFP, nil
	}
	var list corev1.NodeList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, backendSet{}, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		if IsBackend(&list.Items[i]) && r.opts.Platforms.Owns(&list.Items[i]) {
			nodes = append(nodes, &list.Items[i])
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	r.nodes, r.nodesFP, r.nodesAt = nodes, fingerprint(nodes), gen
	return r.nodes, r.nodesFP, nil
}

func (r *reconciler) lastApplied(key types.NamespacedName) (applied, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.applied[key]
	return a, ok
}

func (r *reconciler) remember(key types.NamespacedName, a applied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied[key] = a
}

func (r *reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.applied, key)
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req == nodeSyncRequest {
		r.nodeSync()
		return ctrl.Result{}, nil
	}
	defer r.synced(req.NamespacedName, time.Now())
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, req.NamespacedName, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting service: %w", err)
		}
		return ctrl.Result{}, r.vanished(ctx, req.NamespacedName)
	}
	if !r.owns(svc) {
		return requeue(ctx, r.reclaim(ctx, svc))
	}
	if wantsLoadBalancer(svc) {
		return requeue(ctx, r.ensure(ctx, svc))
	}
	if !slices.Contains(svc.Finalizers, Finalizer) {
		if _, ok := r.lastApplied(req.NamespacedName); !ok {
			return ctrl.Result{}, nil
		}
	}
	return requeue(ctx, r.cleanup(ctx, svc))
}

// reclaim deletes the load balancer this Outrigger made for a Service that
// is no longer of its class: the class changed (through a type change, the
// only way the API server lets it change), perhaps while Outrigger was
// down, so memory cannot be trusted to know. The finalizer (upstream's name,
// shared by every CCM) says only that some CCM provisioned the Service, and
// a load balancer under the Service's name may be another CCM's on the same
// cloud: the proof is the ownership record the provider keeps in the cloud
// (provider.LoadBalancerOwnership), naming this cluster, this Service object
// and this Outrigger's class. Without that record, only what this process
// remembers making is reclaimed.
func (r *reconciler) reclaim(ctx context.Context, svc *corev1.Service) error {
	key := client.ObjectKeyFromObject(svc)
	last, remembered := r.lastApplied(key)
	remembered = remembered && last.service.UID == svc.UID
	if !remembered && (!slices.Contains(svc.Finalizers, Finalizer) || r.checkedNotOurs(svc.UID)) {
		return nil
	}
	ours, err := r.madeHere(ctx, svc, remembered)
	if err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to check for a load balancer made before the Service's class changed: %w", err))
	}
	if !ours {
		r.forget(key)
		r.mu.Lock()
		r.notOurs[svc.UID] = true
		r.mu.Unlock()
		return nil
	}
	klog.FromContext(ctx).Info("Service no longer of this class has a load balancer made by this controller; deleting it",
		"service", key, "class", ptr.Deref(svc.Spec.LoadBalancerClass, ""), "ownClass", r.opts.Class)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		// Nobody else will: delete, clear the status, drop the finalizer.
		return r.cleanup(ctx, svc)
	}
	// Another class's controller owns the Service now, its status and the
	// finalizer with it: only the load balancer is ours.
	r.recorder.Eventf(svc, corev1.EventTypeNormal, EventDeleting, "Deleting load balancer: the Service's class is now %q", ptr.Deref(svc.Spec.LoadBalancerClass, ""))
	if err := r.opts.LoadBalancer.EnsureLoadBalancerDeleted(ctx, r.opts.ClusterName, svc); err != nil && !elsewhere(err) {
		return r.syncFailed(svc, fmt.Errorf("failed to delete the load balancer made before the Service's class changed: %w", err))
	}
	r.forget(key)
	r.recorder.Event(svc, corev1.EventTypeNormal, EventDeleted, "Deleted load balancer")
	return nil
}

// madeHere reports whether the cloud holds a load balancer this Outrigger
// made for svc: by the provider's ownership record when it keeps one, else
// only when this process remembers making it. A load balancer merely
// existing under the Service's name proves nothing.
func (r *reconciler) madeHere(ctx context.Context, svc *corev1.Service, remembered bool) (bool, error) {
	if owners, ok := r.opts.LoadBalancer.(provider.LoadBalancerOwnership); ok {
		owner, exists, err := owners.LoadBalancerOwner(ctx, r.opts.ClusterName, svc)
		switch {
		case elsewhere(err):
			return false, nil
		case err != nil:
			return false, err
		}
		return exists && owner.Owns(r.opts.ClusterName, svc.UID, r.opts.Class), nil
	}
	if !remembered {
		klog.FromContext(ctx).V(2).Info("Service of another class carries the load balancer finalizer; the provider keeps no ownership record, so its load balancer is left alone",
			"service", klog.KObj(svc), "class", ptr.Deref(svc.Spec.LoadBalancerClass, ""))
		return false, nil
	}
	_, exists, err := r.opts.LoadBalancer.GetLoadBalancer(ctx, r.opts.ClusterName, svc)
	if elsewhere(err) {
		return false, nil
	}
	return exists, err
}

// ownLoadBalancerExists reports whether the cloud holds a load balancer of
// this Outrigger's for svc, which cleanup may delete, and whether it holds
// one another CCM made for svc, whose cleanup is that CCM's. With a provider that
// keeps ownership records it must name this cluster, this Service object
// and this Outrigger's class: a Service that left another CCM's class (a
// type change clears the class) is cleaned up by both, and the load
// balancer under its name may be the other CCM's, made again since for the
// Service back in its class. Without records, it is the load balancer under
// the Service's name, as upstream does.
func (r *reconciler) ownLoadBalancerExists(ctx context.Context, svc *corev1.Service) (ours, theirs bool, err error) {
	if owners, ok := r.opts.LoadBalancer.(provider.LoadBalancerOwnership); ok {
		owner, exists, err := owners.LoadBalancerOwner(ctx, r.opts.ClusterName, svc)
		if err != nil || !exists {
			return false, false, err
		}
		// Another cluster's load balancer under the name is not this
		// Service's at all; another class's, for this Service, is.
		ours = owner.Owns(r.opts.ClusterName, svc.UID, r.opts.Class)
		theirs = !ours && owner.ClusterName == r.opts.ClusterName && owner.ServiceUID == svc.UID
		if theirs {
			klog.FromContext(ctx).V(2).Info("Cleanup leaves the load balancer of another class alone, and the finalizer for its CCM", "service", klog.KObj(svc), "class", owner.Class, "ownClass", r.opts.Class)
		}
		return ours, theirs, nil
	}
	_, exists, err := r.opts.LoadBalancer.GetLoadBalancer(ctx, r.opts.ClusterName, svc)
	return exists, false, err
}

func (r *reconciler) checkedNotOurs(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notOurs[uid]
}

// requeue retries a Service whose cloud call carried a retry hint after
// that hint, as upstream does, without growing its failure backoff.
func requeue(ctx context.Context, err error) (ctrl.Result, error) {
	return retryhint.After(ctx, ctrl.Result{}, err)
}

// elsewhere reports whether err is the provider saying another component
// makes this Service's load balancer: not a failure, and nothing to retry.
func elsewhere(err error) bool {
	return errors.Is(err, cloudprovider.ImplementedElsewhere)
}

// vanished handles a Service deleted without our finalizer (someone removed
// it by hand): the load balancer we made for it must not be left behind.
func (r *reconciler) vanished(ctx context.Context, key types.NamespacedName) error {
	last, ok := r.lastApplied(key)
	if !ok {
		return nil
	}
	klog.FromContext(ctx).Info("Service deleted without the load balancer finalizer; deleting its load balancer", "service", key)
	return r.deleteRemembered(ctx, key, last)
}

// deleteRemembered deletes the load balancer made for a Service that is no
// longer there (or no longer the same object), from the copy kept of it.
func (r *reconciler) deleteRemembered(ctx context.Context, key types.NamespacedName, last applied) error {
	r.recorder.Event(last.service, corev1.EventTypeNormal, EventDeleting, "Deleting load balancer")
	if err := r.opts.LoadBalancer.EnsureLoadBalancerDeleted(ctx, r.opts.ClusterName, last.service); err != nil && !elsewhere(err) {
		r.recorder.Eventf(last.service, corev1.EventTypeWarning, EventDeleteFailed, "Error deleting load balancer: %v", err)
		return fmt.Errorf("deleting the load balancer of service %s (uid %s): %w", key, last.service.UID, err)
	}
	r.forget(key)
	r.recorder.Event(last.service, corev1.EventTypeNormal, EventDeleted, "Deleted load balancer")
	return nil
}

// syncFailed records a failed sync as upstream does, with one Event, and
// returns err.
func (r *reconciler) syncFailed(svc *corev1.Service, err error) error {
	r.recorder.Eventf(svc, corev1.EventTypeWarning, EventSyncFailed, "Error syncing load balancer: %v", err)
	return err
}

// ensure provisions or updates the load balancer of svc.
func (r *reconciler) ensure(ctx context.Context, svc *corev1.Service) error {
	log := klog.FromContext(ctx)
	key := client.ObjectKeyFromObject(svc)
	nodes, nodesFP, err := r.backends(ctx)
	if err != nil {
		return r.syncFailed(svc, err)
	}
	spec := specFingerprint(svc)
	last, known := r.lastApplied(key)
	if known && last.service.UID != svc.UID {
		// Deleted without the finalizer and created again under the same
		// name: the old load balancer is named after the old object.
		if err := r.deleteRemembered(ctx, key, last); err != nil {
			return err
		}
		known = false
	}

	// Nothing but the backends may have changed since a successful ensure:
	// at most the cheap call. The status comes from memory, as the cache
	// may not have seen our last status write yet.
	if known && last.spec == spec {
		if last.nodes != nodesFP {
			if err := r.updateHosts(ctx, svc, nodes); err != nil {
				r.forget(key) // the next attempt ensures everything
				return err
			}
			last.nodes = nodesFP
			r.remember(key, last)
		}
		if last.elsewhere {
			return nil
		}
		return r.patchStatus(ctx, svc, last.status, noNodesCondition(svc, len(nodes)))
	}

	r.recorder.Event(svc, corev1.EventTypeNormal, EventEnsuring, "Ensuring load balancer")
	// The finalizer goes on before anything exists in the cloud, so that a
	// Service deleted at any moment from here on has its load balancer
	// cleaned up.
	if !slices.Contains(svc.Finalizers, Finalizer) {
		if err := r.patchFinalizers(ctx, svc, append(slices.Clone(svc.Finalizers), Finalizer)); err != nil {
			return r.syncFailed(svc, fmt.Errorf("failed to add load balancer cleanup finalizer: %w", err))
		}
	}
	wasElsewhere := known && last.elsewhere
	if !wasElsewhere && len(svc.Status.LoadBalancer.Ingress) == 0 && meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) == nil {
		cond := metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: ConditionReasonProvisioning, Message: "Creating the load balancer in the cloud"}
		if err := r.patchStatus(ctx, svc, svc.Status.LoadBalancer, &cond); err != nil {
			return err
		}
	}
	if len(nodes) == 0 {
		r.recorder.Event(svc, corev1.EventTypeWarning, EventNoNodes, "There are no available nodes for LoadBalancer")
	}
	status, err := r.opts.LoadBalancer.EnsureLoadBalancer(ctx, r.opts.ClusterName, svc, nodes)
	if elsewhere(err) {
		log.V(4).Info("Load balancer implemented by another component; leaving it alone", "service", key)
		r.remember(key, applied{service: svc.DeepCopy(), spec: spec, nodes: nodesFP, elsewhere: true})
		// The status is the other component's; only our own condition,
		// which would claim a pending load balancer, goes.
		if meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) != nil {
			return r.patchStatus(ctx, svc, svc.Status.LoadBalancer, nil)
		}
		return nil
	}
	if err == nil && status == nil {
		err = errNilStatus
	}
	if err != nil {
		reason := cloud.Reason(err)
		cond := metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: reason, Message: conditionMessage(reason, err)}
		if perr := r.patchStatus(ctx, svc, svc.Status.LoadBalancer, &cond); perr != nil {
			log.Error(perr, "Recording the load balancer failure on the Service")
		}
		return r.syncFailed(svc, fmt.Errorf("failed to ensure load balancer: %w", err))
	}
	r.recorder.Event(svc, corev1.EventTypeNormal, EventEnsured, "Ensured load balancer")
	if err := r.patchStatus(ctx, svc, *status, noNodesCondition(svc, len(nodes))); err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to update load balancer status: %w", err))
	}
	r.remember(key, applied{service: svc.DeepCopy(), spec: spec, nodes: nodesFP, status: *status.DeepCopy()})
	log.V(2).Info("Ensured load balancer", "service", key, "ingress", status.Ingress, "nodes", len(nodes))
	return nil
}

// updateHosts points the load balancer of svc at nodes, counted and timed
// as upstream's node sync.
func (r *reconciler) updateHosts(ctx context.Context, svc *corev1.Service, nodes []*corev1.Node) error {
	log := klog.FromContext(ctx)
	start := time.Now()
	loadBalancerSyncTotal.Inc()
	err := r.opts.LoadBalancer.UpdateLoadBalancer(ctx, r.opts.ClusterName, svc, nodes)
	updateLoadBalancerHostLatency.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		if len(nodes) == 0 {
			r.recorder.Event(svc, corev1.EventTypeWarning, EventNoNodes, "There are no available nodes for LoadBalancer")
		} else {
			r.recorder.Event(svc, corev1.EventTypeNormal, EventUpdated, "Updated load balancer with new hosts")
		}
		log.V(2).Info("Updated load balancer backends", "service", klog.KObj(svc), "nodes", len(nodes))
		return nil
	case elsewhere(err):
		return nil
	}
	// A load balancer no longer in the cloud has no backends to fail on.
	if _, exists, gerr := r.opts.LoadBalancer.GetLoadBalancer(ctx, r.opts.ClusterName, svc); gerr == nil && !exists {
		log.V(2).Info("Load balancer to update is not in the cloud", "service", klog.KObj(svc), "err", err)
		return nil
	} else if gerr != nil {
		log.Error(gerr, "Checking whether the load balancer exists after a failed update", "service", klog.KObj(svc))
	}
	nodeSyncErrorTotal.Inc()
	r.recorder.Eventf(svc, corev1.EventTypeWarning, EventUpdateFailed,
		"Error updating load balancer with new hosts %v [node names limited, total number of nodes: %d], error: %v", nodeNames(nodes), len(nodes), err)
	return fmt.Errorf("updating load balancer hosts: %w", err)
}

// cleanup deletes the cloud load balancer of a Service being deleted or no
// longer of type LoadBalancer, then lets the Service go.
func (r *reconciler) cleanup(ctx context.Context, svc *corev1.Service) error {
	key := client.ObjectKeyFromObject(svc)
	exists, theirs, err := r.ownLoadBalancerExists(ctx, svc)
	switch {
	case elsewhere(err):
		// Nothing of ours to delete; upstream would retry forever and keep
		// the Service Terminating.
		exists = false
	case err != nil:
		return r.syncFailed(svc, fmt.Errorf("failed to check if load balancer exists before cleanup: %w", err))
	}
	if exists {
		r.recorder.Event(svc, corev1.EventTypeNormal, EventDeleting, "Deleting load balancer")
		if err := r.opts.LoadBalancer.EnsureLoadBalancerDeleted(ctx, r.opts.ClusterName, svc); err != nil && !elsewhere(err) {
			return r.syncFailed(svc, fmt.Errorf("failed to delete load balancer: %w", err))
		}
	}
	// Status first: once the finalizer is gone the Service may be gone too.
	if svc.DeletionTimestamp == nil && (len(svc.Status.LoadBalancer.Ingress) > 0 || meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) != nil) {
		if err := r.patchStatus(ctx, svc, corev1.LoadBalancerStatus{}, nil); err != nil {
			return r.syncFailed(svc, fmt.Errorf("failed to update load balancer status: %w", err))
		}
	}
	if theirs {
		// The finalizer (shared by every CCM) stays for the CCM whose load
		// balancer is left: it cleans up and lets the Service go. Looked
		// at again with the cache's resync.
		r.forget(key)
		return nil
	}
	if i := slices.Index(svc.Finalizers, Finalizer); i >= 0 {
		if err := r.patchFinalizers(ctx, svc, slices.Delete(slices.Clone(svc.Finalizers), i, i+1)); err != nil {
			return r.syncFailed(svc, fmt.Errorf("failed to remove load balancer cleanup finalizer: %w", err))
		}
	}
	r.forget(key)
	r.recorder.Event(svc, corev1.EventTypeNormal, EventDeleted, "Deleted load balancer")
	return nil
}

// noNodesCondition is the condition a provisioned load balancer keeps when
// it has no backends; nil (the condition removed) otherwise.
func noNodesCondition(svc *corev1.Service, nodes int) *metav1.Condition {
	if nodes > 0 {
		return nil
	}
	return &metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: ConditionReasonNodes,
		Message: "The load balancer exists but no node can receive its traffic: every node is being deleted, excluded by the " +
			corev1.LabelNodeExcludeBalancers + " label or tainted " + ToBeDeletedTaint}
}

func conditionMessage(reason string, err error) string {
	var hint string
	switch reason {
	case provider.ReasonQuotaExceeded:
		hint = "The cloud's load balancer quota is used up; delete unused load balancers or raise the quota. "
	case provider.ReasonInvalidAnnotation:
		hint = "Fix the annotation on the Service; retrying with backoff meanwhile. "
	case provider.ReasonThrottled:
		hint = "The cloud is throttling requests; retrying with backoff. "
	case cloud.ReasonTimeout:
		hint = "The cloud did not answer in time; retrying with backoff. "
	}
	msg := hint + "Last error: " + err.Error()
	if len(msg) > 32000 {
		msg = msg[:32000]
	}
	return msg
}

// patchStatus sets status.loadBalancer and sets (cond != nil) or removes the
// LoadBalancerReady condition, in one patch, and only if anything changes.
func (r *reconciler) patchStatus(ctx context.Context, svc *corev1.Service, lb corev1.LoadBalancerStatus, cond *metav1.Condition) error {
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer = lb
	if cond != nil {
		cond.ObservedGeneration = svc.Generation
		meta.SetStatusCondition(&updated.Status.Conditions, *cond)
	} else {
		meta.RemoveStatusCondition(&updated.Status.Conditions, ConditionLoadBalancerReady)
	}
	if equality.Semantic.DeepEqual(svc.Status, updated.Status) || equality.Semantic.DeepEqual(svc.Status, withDefaultIPMode(updated.Status)) {
		return nil
	}
	// A strategic merge, as upstream's: conditions merge by type, so another
	// component's condition written meanwhile is kept.
	if err := r.client.Status().Patch(ctx, updated, client.StrategicMergeFrom(svc)); err != nil {
		return fmt.Errorf("patching service status: %w", err)
	}
	updated.DeepCopyInto(svc)
	return nil
}

// withDefaultIPMode is status as the API server stores it: an ingress with
// an IP and no ipMode reads VIP. Without it, a provider that leaves ipMode
// unset would have its unchanged status written again on every sync.
func withDefaultIPMode(status corev1.ServiceStatus) corev1.ServiceStatus {
	out := *status.DeepCopy()
	for i, ing := range out.LoadBalancer.Ingress {
		if ing.IP != "" && ing.IPMode == nil {
			out.LoadBalancer.Ingress[i].IPMode = ptr.To(corev1.LoadBalancerIPModeVIP)
		}
	}
	return out
}

func (r *reconciler) patchFinalizers(ctx context.Context, svc *corev1.Service, finalizers []string) error {
	updated := svc.DeepCopy()
	updated.Finalizers = finalizers
	if err := r.client.Patch(ctx, updated, client.MergeFromWithOptions(svc, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching service finalizers: %w", err)
	}
	updated.DeepCopyInto(svc)
	return nil
}
