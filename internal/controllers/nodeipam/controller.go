// Package nodeipam is the node-ipam-controller: it gives every node its pod
// CIDRs (spec.podCIDR and spec.podCIDRs, one per cluster CIDR, so IPv4,
// IPv6 or dual-stack), either from --cluster-cidr itself (RangeAllocator) or
// from the cloud (CloudAllocator). Upstream offers this only from
// kube-controller-manager; Outrigger does it natively.
//
// The range allocator keeps its state in memory and rebuilds it from the
// nodes whenever it starts (a restart, a new leader), so no CIDR is ever held
// in two places that could disagree. A node whose CIDR range is exhausted is
// left without one, with a CIDRNotAvailable Event, and retried.
package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/outrigger-ccm/outrigger/internal/controllers/retryhint"
	"github.com/outrigger-ccm/outrigger/internal/platform"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "node-ipam-controller"

// Allocator types, as upstream's --cidr-allocator-type values.
const (
	RangeAllocator = "RangeAllocator"
	CloudAllocator = "CloudAllocator"
)

// Event reasons.
const (
	// ReasonCIDRNotAvailable is upstream's reason for an exhausted range.
	ReasonCIDRNotAvailable = "CIDRNotAvailable"
	// ReasonCIDRAssignmentFailed is recorded when the cloud could not say.
	ReasonCIDRAssignmentFailed = "CIDRAssignmentFailed"
)

// exhaustedRetry is how soon a node left without a CIDR is tried again (a
// deleted node may have freed one meanwhile).
const exhaustedRetry = 10 * time.Second

// Options configure the controller.
type Options struct {
	// Type is RangeAllocator or CloudAllocator.
	Type string
	// ClusterCIDRs are one IPv4 and/or one IPv6 CIDR (RangeAllocator).
	ClusterCIDRs []netip.Prefix
	// MaskV4 and MaskV6 size each node's CIDR (RangeAllocator).
	MaskV4, MaskV6 int
	// Cloud assigns CIDRs (CloudAllocator).
	Cloud provider.NodeCIDRSource
	// Workers patch nodes concurrently; allocation itself is serialized.
	Workers int
	// Platforms are the nodes this Outrigger serves: another platform's
	// node (or one whose platform is not known yet) gets no CIDR from it,
	// though the CIDRs it holds are never handed out again.
	Platforms platform.Set
}

type reconciler struct {
	client   client.Client
	recorder record.EventRecorder
	opts     Options
	ranges   *rangeAllocator // nil for CloudAllocator

	rebuildMu sync.Mutex
	rebuilt   bool
}

// Setup validates opts and adds the controller to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	r := &reconciler{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorderFor(Name), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
	}
	switch opts.Type {
	case RangeAllocator:
		if len(opts.ClusterCIDRs) == 0 {
			return errors.New("node-ipam-controller with RangeAllocator needs --cluster-cidr")
		}
		a, err := newRangeAllocator(opts.ClusterCIDRs, opts.MaskV4, opts.MaskV6)
		if err != nil {
			return fmt.Errorf("node-ipam-controller: %w", err)
		}
		r.ranges = a
	case CloudAllocator:
		if opts.Cloud == nil {
			return errors.New("--cidr-allocator-type=CloudAllocator needs a provider that assigns node CIDRs; this one does not")
		}
	default:
		return fmt.Errorf("--cidr-allocator-type %q: use RangeAllocator or CloudAllocator", opts.Type)
	}
	if r.opts.Workers <= 0 {
		r.opts.Workers = 64
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		For(&corev1.Node{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(e event.CreateEvent) bool { return lacksCIDRs(e.Object) },
			UpdateFunc: func(e event.UpdateEvent) bool { return lacksCIDRs(e.ObjectNew) },
			// A deleted node's CIDRs go back to the pool.
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return true },
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(retryhint.Requeue(r))
	if err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	return nil
}

func lacksCIDRs(o client.Object) bool {
	n, ok := o.(*corev1.Node)
	return ok && len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR == ""
}

func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// rebuildFrom occupies every CIDR the cluster's nodes hold. It runs once,
// before the first allocation; the cache has synced by then.
func (r *reconciler) rebuildFrom(ctx context.Context) error {
	r.rebuildMu.Lock()
	defer r.rebuildMu.Unlock()
	if r.rebuilt {
		return nil
	}
	var list corev1.NodeList
	if err := r.client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing nodes to rebuild CIDR allocations: %w", err)
	}
	for i := range list.Items {
		r.ranges.occupy(list.Items[i].Name, podCIDRs(&list.Items[i]))
	}
	r.rebuilt = true
	klog.FromContext(ctx).V(2).Info("Rebuilt node CIDR allocations from the cluster", "nodes", len(list.Items))
	return nil
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.ranges != nil {
		if err := r.rebuildFrom(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	var node corev1.Node
	if err := r.client.Get(ctx, req.NamespacedName, &node); err != nil {
		if apierrors.IsNotFound(err) && r.ranges != nil {
			r.ranges.release(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if have := podCIDRs(&node); len(have) > 0 {
		if r.ranges != nil {
			r.ranges.occupy(node.Name, have)
		}
		return ctrl.Result{}, nil
	}
	if !r.opts.Platforms.Owns(&node) {
		return ctrl.Result{}, nil
	}

	cidrs, err := r.assign(ctx, &node)
	if errors.Is(err, ErrExhausted) {
		r.recorder.Eventf(&node, corev1.EventTypeWarning, ReasonCIDRNotAvailable, "Node %s has no pod CIDR: %v", node.Name, err)
		return ctrl.Result{RequeueAfter: exhaustedRetry}, nil
	}
	if err != nil {
		r.recorder.Eventf(&node, corev1.EventTypeWarning, ReasonCIDRAssignmentFailed, "Assigning pod CIDRs: %v", err)
		return ctrl.Result{}, err
	}

	updated := node.DeepCopy()
	updated.Spec.PodCIDR, updated.Spec.PodCIDRs = cidrs[0], cidrs
	// No optimistic lock: the patch touches only the pod CIDR fields, and
	// the API server refuses to change them once set, so a racing writer
	// cannot be overwritten, and other writers (labels, taints) do not make
	// this patch conflict.
	if err := r.client.Patch(ctx, updated, client.MergeFrom(&node)); err != nil {
		if r.ranges != nil && notWritten(err) {
			r.ranges.release(node.Name)
		}
		// Otherwise (a timeout, a 5xx, a connection lost) the patch may
		// have committed: the node keeps its reservation, and the retry
		// finds either the CIDRs on the node or the same reservation.
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		if apierrors.IsInvalid(err) {
			// Someone set other CIDRs first: take note of theirs, with
			// the controller's backoff.
			return ctrl.Result{}, fmt.Errorf("setting pod CIDRs on node %s: someone set others first: %w", node.Name, err)
		}
		return ctrl.Result{}, fmt.Errorf("setting pod CIDRs %v on node %s: %w", cidrs, node.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Assigned pod CIDRs", "node", klog.KObj(&node), "podCIDRs", cidrs)
	return ctrl.Result{}, nil
}

// notWritten reports whether a failed write certainly did not commit: the
// API server refused it (a 4xx other than 408, which is a timeout). Only
// then may a CIDR reserved for it go back to the pool; after an ambiguous
// failure another node could be given a CIDR this node holds.
func notWritten(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

func (r *reconciler) assign(ctx context.Context, node *corev1.Node) ([]string, error) {
	if r.ranges != nil {
		return r.ranges.allocate(node.Name)
	}
	cidrs, err := r.opts.Cloud.NodeCIDRs(ctx, node)
	if err != nil {
		return nil, err
	}
	if len(cidrs) == 0 || len(cidrs) > 2 {
		return nil, fmt.Errorf("the cloud assigned %d CIDRs to node %s; want one or two", len(cidrs), node.Name)
	}
	for _, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return nil, fmt.Errorf("the cloud assigned node %s an invalid CIDR: %w", node.Name, err)
		}
	}
	return cidrs, nil
}
