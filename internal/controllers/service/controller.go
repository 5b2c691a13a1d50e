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
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/outrigger-ccm/outrigger/internal/apilimits"
	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/controllers/retryhint"
	"github.com/outrigger-ccm/outrigger/internal/platform"
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
	// EventAnswerRefused: part of the provider's answer does not fit the
	// API (internal/apilimits) and is left out of the status.
	EventAnswerRefused = "ProviderAnswerRefused" // Warning
)

// Condition reasons of Outrigger's own (the cloud's come from cloud.Reason).
const (
	ConditionReasonNodes = "NoNodes"
	// ConditionReasonProvisioning is the condition's reason while the first
	// EnsureLoadBalancer is under way.
	ConditionReasonProvisioning = "Provisioning"
)

// provisioningAfter is how long a first EnsureLoadBalancer runs before the
// Service says Provisioning: a cloud that answers sooner (most updates,
// a fast cloud's creations) costs no status write for it, and the API
// server, busy creating a burst of Services, one write less per Service.
const provisioningAfter = time.Second

// provisioningNote writes the Provisioning condition on a copy of a
// Service once its first EnsureLoadBalancer has run provisioningAfter.
type provisioningNote struct {
	timer *time.Timer
	svc   *corev1.Service
	done  chan struct{}
}

func (r *reconciler) noteProvisioning(ctx context.Context, svc *corev1.Service) *provisioningNote {
	n := &provisioningNote{svc: svc.DeepCopy(), done: make(chan struct{})}
	n.timer = time.AfterFunc(provisioningAfter, func() {
		defer close(n.done)
		cond := metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: ConditionReasonProvisioning, Message: "Creating the load balancer in the cloud"}
		if err := patchStatus(ctx, r.client, n.svc, n.svc.Status.LoadBalancer, &cond); err != nil {
			klog.FromContext(ctx).V(2).Info("Recording that the load balancer is being created", "service", klog.KObj(n.svc), "err", err)
		}
	})
	return n
}

// stop ends the wait once the call returned; when the condition was
// written, svc takes the status written, so that the next status patch
// replaces it.
func (n *provisioningNote) stop(svc *corev1.Service) {
	if n == nil || n.timer.Stop() {
		return
	}
	<-n.done
	n.svc.Status.DeepCopyInto(&svc.Status)
}

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
	// ClusterID returns the cluster's identity (provider.ClusterIdentity),
	// known once the provider is initialized, before the controller runs.
	// The orphan sweep deletes only load balancers whose record carries
	// it; nil or "": the sweep deletes nothing.
	ClusterID func() string
	// Provider names the provider when an Outrigger runs several: the
	// controller's name and the source of its Events end in "/Provider".
	// Empty (one provider): upstream's names.
	Provider string
	// Tenant labels the orphan sweep's metrics with its cluster's tenant
	// in tenant mode; "" for a single cluster. Upstream's
	// service_controller_* metrics are not labelled.
	Tenant string
	// Clock times the node sync window and the wait for joining nodes
	// (JoinWait). Default: the real clock; tests pass a fake one and step
	// it through the windows.
	Clock clock.Clock
}

// reconciler provisions the load balancer of one Service at a time. What it
// shares between workers each has its own lock: memory (what it applied),
// backends (the node list) and rounds (node sync timing).
type reconciler struct {
	client   client.Client
	recorder record.EventRecorder
	opts     Options
	memory   *memory
	backends *backendList
	rounds   *syncRounds
	// returned requeues a Service whose cloud call its worker stopped
	// waiting for (a straggler) as soon as the call returns, so that its
	// answer is acted on then, not after the retry backoff.
	returned *retryhint.Returned
}

// Setup adds the controller to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.LoadBalancer == nil {
		return errors.New("service-lb-controller needs a provider with LoadBalancer")
	}
	if opts.Workers <= 0 {
		opts.Workers = 256
	}
	if opts.NodeSyncWindow <= 0 {
		opts.NodeSyncWindow = time.Second
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	name, component := Name, EventComponent
	if opts.Provider != "" {
		name, component = name+"/"+opts.Provider, component+"/"+opts.Provider
	}
	r := &reconciler{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorderFor(component), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
		memory:   newMemory(),
		backends: newBackendList(cachednodes.FromCache(mgr.GetCache()), opts.Platforms),
		rounds:   newSyncRounds(),
		returned: retryhint.NewReturned(),
	}
	nodes := newNodeFanOut(mgr.GetCache(), opts.Clock, opts.NodeSyncWindow, opts.Platforms, r.backends, r.memory.keys, r.rounds)
	err := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		// As upstream, only a change a load balancer is built from, or one
		// that calls for cleanup, is a reason to run; our own writes
		// (finalizer, status) are not.
		For(&corev1.Service{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return needsSync(e.ObjectOld.(*corev1.Service), e.ObjectNew.(*corev1.Service))
		}})).
		// Node changes queue the Services whose backends they may change.
		WatchesRawSource(nodes).
		WatchesRawSource(r.returned.Source()).
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
		sweep := &orphanSweep{client: mgr.GetClient(), owners: owners, lb: opts.LoadBalancer, recorder: r.recorder, tenant: opts.Tenant,
			cluster: opts.ClusterName, clusterID: opts.ClusterID, class: opts.Class, period: opts.OrphanSweepPeriod, seen: map[string]time.Time{}, now: time.Now}
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
	_, ok := r.memory.last(client.ObjectKeyFromObject(svc))
	return ok
}

func wantsLoadBalancer(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.DeletionTimestamp == nil
}

// Reconcile implements reconcile.Reconciler.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	defer r.rounds.synced(req.NamespacedName, time.Now())
	ctx = r.returned.Context(ctx, req.NamespacedName)
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, req.NamespacedName, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("getting service: %w", err)
		}
		return ctrl.Result{}, r.vanished(ctx, req.NamespacedName)
	}
	if !r.owns(svc) {
		return ctrl.Result{}, r.reclaim(ctx, svc)
	}
	if wantsLoadBalancer(svc) {
		return ctrl.Result{}, r.ensure(ctx, svc)
	}
	if !slices.Contains(svc.Finalizers, Finalizer) {
		if _, ok := r.memory.last(req.NamespacedName); !ok {
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, r.cleanup(ctx, svc)
}

// elsewhere reports whether err is the provider saying another component
// makes this Service's load balancer: not a failure, and nothing to retry.
func elsewhere(err error) bool {
	return errors.Is(err, cloudprovider.ImplementedElsewhere)
}

// vanished handles a Service deleted without our finalizer (someone removed
// it by hand): the load balancer we made for it must not be left behind.
func (r *reconciler) vanished(ctx context.Context, key types.NamespacedName) error {
	last, ok := r.memory.last(key)
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
	r.memory.forget(key)
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
	nodes, nodesFP, err := r.backends.get(ctx)
	if err != nil {
		return r.syncFailed(svc, err)
	}
	spec := specFingerprint(svc)
	last, known := r.memory.last(key)
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
				r.memory.forget(key) // the next attempt ensures everything
				return err
			}
			last.nodes = nodesFP
			r.memory.remember(key, last)
		}
		if last.elsewhere {
			return nil
		}
		return patchStatus(ctx, r.client, svc, last.status, noNodesCondition(svc, len(nodes)))
	}

	r.recorder.Event(svc, corev1.EventTypeNormal, EventEnsuring, "Ensuring load balancer")
	// The finalizer goes on before anything exists in the cloud, so that a
	// Service deleted at any moment from here on has its load balancer
	// cleaned up.
	if err := addFinalizer(ctx, r.client, svc); err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to add load balancer cleanup finalizer: %w", err))
	}
	wasElsewhere := known && last.elsewhere
	var provisioning *provisioningNote
	if !wasElsewhere && len(svc.Status.LoadBalancer.Ingress) == 0 && meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) == nil {
		provisioning = r.noteProvisioning(ctx, svc)
	}
	if len(nodes) == 0 {
		r.recorder.Event(svc, corev1.EventTypeWarning, EventNoNodes, "There are no available nodes for LoadBalancer")
	}
	status, err := r.opts.LoadBalancer.EnsureLoadBalancer(ctx, r.opts.ClusterName, svc, nodes)
	provisioning.stop(svc)
	if elsewhere(err) {
		log.V(4).Info("Load balancer implemented by another component; leaving it alone", "service", key)
		r.memory.remember(key, applied{service: svc.DeepCopy(), spec: spec, nodes: nodesFP, elsewhere: true})
		// The status is the other component's; only our own condition,
		// which would claim a pending load balancer, goes.
		if meta.FindStatusCondition(svc.Status.Conditions, ConditionLoadBalancerReady) != nil {
			return patchStatus(ctx, r.client, svc, svc.Status.LoadBalancer, nil)
		}
		return nil
	}
	if err == nil && status == nil {
		err = errNilStatus
	}
	if err != nil {
		reason := cloud.Reason(err)
		cond := metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: reason, Message: conditionMessage(reason, err)}
		if perr := patchStatus(ctx, r.client, svc, svc.Status.LoadBalancer, &cond); perr != nil {
			log.Error(perr, "Recording the load balancer failure on the Service")
		}
		if reason == cloud.ReasonCallInFlight {
			// A call for the Service still runs (far past its method's
			// answers, or past its timeout): the condition says so, and
			// the retries that wait for it record no Event each.
			return fmt.Errorf("failed to ensure load balancer: %w", err)
		}
		return r.syncFailed(svc, fmt.Errorf("failed to ensure load balancer: %w", err))
	}
	// An ingress point the API refuses would fail the whole status write,
	// retried for ever: it is left out, and the Event names it.
	if ingress, refused := apilimits.LoadBalancerIngress(status.Ingress); len(refused) > 0 {
		status = status.DeepCopy() // the provider's, maybe shared
		status.Ingress = ingress
		r.recorder.Eventf(svc, corev1.EventTypeWarning, EventAnswerRefused, "Provider %s answered load balancer ingress the API does not accept; left out: %s",
			cloud.ProviderNameOf(r.opts.LoadBalancer, r.providerName()), apilimits.Summary(refused))
		log.Info("Left out ingress points the API does not accept", "service", key, "refused", apilimits.Summary(refused))
	}
	r.recorder.Event(svc, corev1.EventTypeNormal, EventEnsured, "Ensured load balancer")
	if err := patchStatus(ctx, r.client, svc, *status, noNodesCondition(svc, len(nodes))); err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to update load balancer status: %w", err))
	}
	r.memory.remember(key, applied{service: svc.DeepCopy(), spec: spec, nodes: nodesFP, status: *status.DeepCopy()})
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
		if err := patchStatus(ctx, r.client, svc, corev1.LoadBalancerStatus{}, nil); err != nil {
			return r.syncFailed(svc, fmt.Errorf("failed to update load balancer status: %w", err))
		}
	}
	if theirs {
		// The finalizer (shared by every CCM) stays for the CCM whose load
		// balancer is left: it cleans up and lets the Service go. Looked
		// at again with the cache's resync.
		r.memory.forget(key)
		return nil
	}
	if err := removeFinalizer(ctx, r.client, svc); err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to remove load balancer cleanup finalizer: %w", err))
	}
	r.memory.forget(key)
	r.recorder.Event(svc, corev1.EventTypeNormal, EventDeleted, "Deleted load balancer")
	return nil
}
