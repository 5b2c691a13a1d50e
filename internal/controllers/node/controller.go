package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/outrigger-ccm/outrigger/internal/apilimits"
	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/controllers/retryhint"
	"github.com/outrigger-ccm/outrigger/internal/platform"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "cloud-node-controller"

// EventSource is the component upstream's cloud-node-controller writes its
// Events as.
const EventSource = "cloud-node-controller"

// Event reasons.
const (
	ReasonSynced = "Synced"
	// ReasonSyncFailed is recorded when the node cannot be initialized
	// yet; the controller keeps retrying with backoff.
	ReasonSyncFailed = "SyncFailed"
	// ReasonNotOwned is recorded once on a tainted node this Outrigger
	// leaves alone: its providerID has a scheme of another platform, or it
	// has none and the provider does not know it by name. The node keeps
	// its taint for its own platform's CCM.
	ReasonNotOwned = "NodeNotOwned"
	// ReasonAnswerRefused is recorded when part of the provider's answer
	// (an address, a label) does not fit the API (internal/apilimits) and
	// is left out; the rest is written.
	ReasonAnswerRefused = "ProviderAnswerRefused"
)

// answerRefused records what of the provider's answer was left out.
func (r *Reconciler) answerRefused(node *corev1.Node, what string, refused []apilimits.Violation) {
	r.recorder.Eventf(node, corev1.EventTypeWarning, ReasonAnswerRefused, "Provider %s answered %s the API does not accept; left out: %s",
		cloud.ProviderNameOf(r.opts.Instances, r.providerName()), what, apilimits.Summary(refused))
}

// providerName names the provider when the layer does not (a test's
// double): the Provider tag.
func (r *Reconciler) providerName() string {
	if r.opts.Provider != "" {
		return r.opts.Provider
	}
	return "(unnamed)"
}

// ProviderIDWait is how long a node without a providerID is given for its
// kubelet to set one (KEP-5778) before the provider is asked for it by name,
// when --cloud-provider-platforms is set.
const ProviderIDWait = 30 * time.Second

// Instances is what this controller needs from the cloud-call layer: the
// standard InstanceMetadata for a node it initializes (the layer gathers
// concurrent ones into batch calls when the provider offers them), and a
// lookup of many nodes for the address refresh.
type Instances interface {
	InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error)
	SupportsBatch() bool
	Lookup(ctx context.Context, nodes []*corev1.Node, need cloud.Need) []provider.InstanceStatus
}

// Options configure the controller.
type Options struct {
	// Instances is the provider's InstancesV2 behind the cloud-call layer.
	Instances Instances
	// Workers initialize nodes concurrently. Default 256: a node costs a
	// share of one batch call and two API writes, so many run at once, and
	// the cloud-call layer keeps the cloud within its rate limit.
	Workers int
	// RefreshPeriod is how often every node's addresses are compared with
	// the cloud's (--node-status-update-frequency). Default 5m.
	RefreshPeriod time.Duration
	// Platforms are the nodes this Outrigger serves (the zero Set: all).
	Platforms platform.Set
	// ProviderIDWait overrides ProviderIDWait (tests).
	ProviderIDWait time.Duration
	// Provider names the provider when an Outrigger runs several: the
	// controller's name and the source of its Events end in "/Provider".
	// Empty (one provider): upstream's names.
	Provider string
	// Siblings are the node controllers of the other providers of this
	// Outrigger (nil: it runs one provider).
	Siblings *Siblings
	// Tenant labels the controller's own metrics
	// (outrigger_nodes_uninitialized) with its cluster's tenant in tenant
	// mode; "" for a single cluster. Upstream's metrics are not labelled.
	Tenant string
}

// providerIDOptional is implemented by instances that may leave a node
// without a provider ID (cloud.Instances for a provider with only the older
// Instances interface).
type providerIDOptional interface {
	ProviderIDOptional() bool
}

// Reconciler initializes tainted nodes and keeps initialized nodes' GA
// topology labels in step with the beta ones.
type Reconciler struct {
	client   client.Client
	recorder record.EventRecorder
	opts     Options
	// emptyProviderIDOK: the provider may leave nodes without a provider ID.
	emptyProviderIDOK bool
	// returned requeues a node whose cloud call its worker stopped waiting
	// for (a straggler) as soon as the call returns: its answer, kept by the
	// layer, initializes the node then, not after the retry backoff.
	returned *retryhint.Returned
}

// Setup adds the controller and its address refresher to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Instances == nil {
		return errors.New("cloud-node-controller needs a provider with InstancesV2")
	}
	if opts.Workers <= 0 {
		opts.Workers = 256
	}
	if opts.RefreshPeriod <= 0 {
		opts.RefreshPeriod = 5 * time.Minute
	}
	if opts.ProviderIDWait <= 0 {
		opts.ProviderIDWait = ProviderIDWait
	}
	name, source := Name, EventSource
	if opts.Provider != "" {
		name, source = name+"/"+opts.Provider, source+"/"+opts.Provider
	}
	r := &Reconciler{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorderFor(source), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
		returned: retryhint.NewReturned(),
	}
	if p, ok := opts.Instances.(providerIDOptional); ok {
		r.emptyProviderIDOK = p.ProviderIDOptional()
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&corev1.Node{}, builder.WithPredicates(needsInitialization())).
		WithOptions(controller.Options{MaxConcurrentReconciles: opts.Workers}).
		WatchesRawSource(r.returned.Source()).
		Complete(retryhint.Requeue(r))
	if err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	if err := mgr.Add(&refresher{client: mgr.GetClient(), nodes: cachednodes.FromCache(mgr.GetCache()), opts: opts, controller: name}); err != nil {
		return fmt.Errorf("setting up %s address refresh: %w", Name, err)
	}
	return nil
}

// needsInitialization lets through the nodes that carry the uninitialized
// taint when they appear (or at start-up) and nodes that get the taint back,
// and initialized nodes whose GA topology labels lag the beta ones.
// Updates of a node that was tainted before and still is are our own address
// patch, mid-initialization, or a change a retry with backoff will see
// anyway; reacting to them would make a second pass over the node that races
// the first one's final patch.
func needsInitialization() predicate.Funcs {
	tainted := func(o client.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && isUninitialized(n)
	}
	lagging := func(o client.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && !isUninitialized(n) && len(labelsToReconcile(n)) > 0
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return tainted(e.Object) || lagging(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return tainted(e.ObjectNew) && (!tainted(e.ObjectOld) || providerIDChanged(e)) || lagging(e.ObjectNew)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return tainted(e.Object) || lagging(e.Object) },
	}
}

// providerIDChanged: a tainted node left alone as another platform's (or
// as unknown) is looked at again when its providerID changes.
func providerIDChanged(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*corev1.Node)
	n, ok2 := e.ObjectNew.(*corev1.Node)
	return ok1 && ok2 && o.Spec.ProviderID != n.Spec.ProviderID
}

// Reconcile initializes one node if it still carries the uninitialized
// taint, and otherwise reconciles its beta and GA topology labels.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := klog.FromContext(ctx)
	var node corev1.Node
	if err := r.client.Get(ctx, req.NamespacedName, &node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	owner := r.opts.Platforms.Of(&node)
	if owner == platform.NotOwned {
		if sib := r.opts.Siblings; sib != nil {
			sib.forget(node.UID)
			if !sib.nobodys(&node) || sib.speaker() != r.opts.Provider {
				return ctrl.Result{}, nil // a sibling's node, or a sibling speaks
			}
		}
		if isUninitialized(&node) {
			r.recorder.Eventf(&node, corev1.EventTypeNormal, ReasonNotOwned,
				"Left for its own platform's cloud-controller-manager: providerID scheme %q is not among this one's platforms %v", platform.Scheme(node.Spec.ProviderID), r.platforms().Schemes())
		}
		return ctrl.Result{}, nil
	}
	if !isUninitialized(&node) {
		if owner != platform.Owned {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, r.reconcileLabels(ctx, &node)
	}
	if owner == platform.Undecided {
		// The kubelet may still set the providerID (its --provider-id):
		// give it a bounded time before asking the provider by name.
		if wait := r.opts.ProviderIDWait - time.Since(node.CreationTimestamp.Time); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}

	st := r.lookup(r.returned.Context(ctx, types.NamespacedName{Name: node.Name}), &node)
	if owner == platform.Undecided && st.Err == nil {
		var id string
		if st.Metadata != nil {
			id = st.Metadata.ProviderID
		}
		if !st.Exists || st.Metadata == nil || !r.opts.Platforms.ServesID(id) {
			// Not this platform's node: keep the taint for its own CCM,
			// say so once, and never delete it. A providerID set later
			// brings it back (providerIDChanged). Beside siblings, only
			// the last of them to find it unknown says so.
			if sib := r.opts.Siblings; sib != nil && !sib.decline(&node, r.opts.Provider) {
				return ctrl.Result{}, nil
			}
			r.recorder.Eventf(&node, corev1.EventTypeNormal, ReasonNotOwned,
				"Left for its own platform's cloud-controller-manager: the node has no providerID and no platform of this one (%v) knows it", r.platforms().Schemes())
			return ctrl.Result{}, nil
		}
	}
	switch {
	case st.Err != nil:
		// A call for the node that still runs is waited for (Requeue
		// looks at the node again when it returns), without an Event.
		if cloud.Reason(st.Err) != cloud.ReasonCallInFlight {
			r.recorder.Eventf(&node, corev1.EventTypeWarning, ReasonSyncFailed, "Failed to get instance metadata from the cloud: %v", st.Err)
		}
		return ctrl.Result{}, fmt.Errorf("getting instance metadata for node %s: %w", node.Name, st.Err)
	case !st.Exists || st.Metadata == nil:
		// Clouds are eventually consistent: an instance can be listed a
		// moment after its kubelet registered. Retry; the lifecycle
		// controller handles instances that are really gone.
		r.recorder.Event(&node, corev1.EventTypeWarning, ReasonSyncFailed, "The cloud does not know this node's instance yet")
		return ctrl.Result{}, fmt.Errorf("node %s: %w", node.Name, cloudprovider.InstanceNotFound)
	case st.Metadata.ProviderID == "" && node.Spec.ProviderID == "" && !r.emptyProviderIDOK:
		// Load balancers and the lifecycle controller find instances by
		// provider ID, which cannot be set once the taint is gone: keep the
		// node tainted until the provider gives one, as upstream does.
		r.recorder.Event(&node, corev1.EventTypeWarning, ReasonSyncFailed, "The cloud provider did not give this node a provider ID")
		return ctrl.Result{}, fmt.Errorf("node %s: %w", node.Name, errNoProviderID)
	}

	// Addresses first: when the taint goes, the node is complete.
	if _, refused, _, _ := desiredAddresses(&node, st.Metadata.NodeAddresses); len(refused) > 0 {
		r.answerRefused(&node, "node addresses", refused)
	}
	if _, err := patchAddresses(ctx, r.client, &node, st.Metadata.NodeAddresses); err != nil {
		r.recorder.Eventf(&node, corev1.EventTypeWarning, ReasonSyncFailed, "Failed to set node addresses: %v", err)
		return ctrl.Result{}, err
	}

	updated, skipped := initialized(&node, st.Metadata)
	if len(skipped) > 0 {
		log.Info("Skipped provider labels", "node", klog.KObj(&node), "labels", skipped)
		r.recorder.Eventf(&node, corev1.EventTypeWarning, ReasonAnswerRefused, "Provider %s answered labels left off: %s",
			cloud.ProviderNameOf(r.opts.Instances, r.providerName()), strings.Join(skipped, "; "))
	}
	patch, err := initializationPatch(&node, updated)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.client.Patch(ctx, updated, patch); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			// The taint moved (someone changed the taints meanwhile):
			// read the node again, with the controller's backoff.
			return ctrl.Result{}, fmt.Errorf("initializing node %s: its taints changed meanwhile: %w", node.Name, err)
		}
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // deleted meanwhile: nothing to initialize
		}
		return ctrl.Result{}, fmt.Errorf("initializing node %s: %w", node.Name, err)
	}
	if r.opts.Siblings != nil {
		r.opts.Siblings.forget(node.UID)
	}
	taintRemovalDelay.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
	r.recorder.Event(updated, corev1.EventTypeNormal, ReasonSynced, "Node synced successfully")
	initialSyncDelay.Observe(time.Since(node.CreationTimestamp.Time).Seconds())
	log.V(2).Info("Initialized node", "node", klog.KObj(&node), "providerID", updated.Spec.ProviderID)
	return ctrl.Result{}, nil
}

var errNoProviderID = errors.New("the cloud provider did not set a provider ID")

// platforms are the schemes this Outrigger serves: its provider's, or with
// siblings all of theirs.
func (r *Reconciler) platforms() platform.Set {
	if r.opts.Siblings != nil {
		return r.opts.Siblings.all
	}
	return r.opts.Platforms
}

// reconcileLabels copies each beta topology label's value to its GA label
// when the GA one is missing or differs, as upstream does for initialized
// nodes (the beta labels are the source of truth there).
func (r *Reconciler) reconcileLabels(ctx context.Context, node *corev1.Node) error {
	labels := labelsToReconcile(node)
	if len(labels) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return fmt.Errorf("encoding labels of node %s: %w", node.Name, err)
	}
	if err := r.client.Patch(ctx, node, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reconciling topology labels of node %s: %w", node.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Reconciled topology labels", "node", klog.KObj(node), "labels", labels)
	return nil
}

// lookup asks the cloud for node's metadata: gone only on the provider's
// InstanceNotFound, an error never reads as gone.
func (r *Reconciler) lookup(ctx context.Context, node *corev1.Node) provider.InstanceStatus {
	md, err := r.opts.Instances.InstanceMetadata(ctx, node)
	switch {
	case errors.Is(err, cloudprovider.InstanceNotFound):
		return provider.InstanceStatus{Exists: false}
	case err != nil:
		return provider.InstanceStatus{Exists: true, Err: err}
	}
	return provider.InstanceStatus{Exists: true, Metadata: md}
}

// patchAddresses writes the addresses the node should have, if they differ,
// and reports whether it wrote. node is updated from the answer, so a
// following patch of the node carries the new resourceVersion. A JSON merge patch replaces the list whole,
// which is right for a list with several addresses of one type (dual-stack),
// where a strategic merge keyed on type is not.
func patchAddresses(ctx context.Context, c client.Client, node *corev1.Node, cloudAddrs []corev1.NodeAddress) (bool, error) {
	want, _, ok, err := desiredAddresses(node, cloudAddrs)
	if err != nil || !ok || addressesEqual(node.Status.Addresses, want) {
		return false, err
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": want}})
	if err != nil {
		return false, fmt.Errorf("encoding addresses of node %s: %w", node.Name, err)
	}
	if err := c.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // deleted meanwhile: nothing to write
		}
		return false, fmt.Errorf("patching addresses of node %s: %w", node.Name, err)
	}
	return true, nil
}
