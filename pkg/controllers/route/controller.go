// Package route is the node-route-controller: one cloud route per node pod
// CIDR (two for a dual-stack node), so pod traffic reaches every node.
// Routes inside the cluster CIDR that no node needs any more (including
// blackholes, whose instance is gone) are deleted; routes outside it are never
// touched. A blackhole route whose node is still registered is left until the
// lifecycle controller deletes the node: recreating it would only make another
// blackhole, once per pass. A node whose routes all exist gets the NetworkUnavailable=False
// condition (reason RouteCreated), as upstream sets it.
//
// Unlike upstream, which lists and then retries creates in a loop per node
// (k/k#21561: hundreds of thousands of rejected inserts on a 1,000-node
// cluster), every pass is one ListRoutes and exactly the creates and deletes
// the difference needs, made through the cloud-call layer's rate limit; node
// events are coalesced into passes by the work queue, and a failed create is
// retried on the next pass, not in a tight loop.
package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
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
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "node-route-controller"

// Event reasons and condition values, as upstream's.
const (
	ReasonFailedToCreateRoute = "FailedToCreateRoute"
	ConditionReasonCreated    = "RouteCreated"
	ConditionReasonNotCreated = "NoRouteCreated"
)

// Options configure the controller.
type Options struct {
	Routes      cloudprovider.Routes
	ClusterName string
	// ClusterCIDRs bound what the controller owns: routes outside them are
	// never deleted.
	ClusterCIDRs []netip.Prefix
	// Period of the full reconcile (--route-reconciliation-period).
	Period time.Duration
	// Workers bound concurrent creates, deletes and node patches.
	Workers int
}

type reconciler struct {
	client   client.Client
	recorder record.EventRecorder
	opts     Options
}

// passKey is the one work item: every node event asks for a full pass, and
// the queue folds a burst of them into one.
var passKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "routes"}}

// Setup adds the controller to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Routes == nil {
		return errors.New("node-route-controller needs a provider with Routes")
	}
	if len(opts.ClusterCIDRs) == 0 {
		return errors.New("node-route-controller needs --cluster-cidr")
	}
	if opts.Period <= 0 {
		opts.Period = 10 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	r := &reconciler{
		client:   mgr.GetClient(),
		recorder: mgr.GetEventRecorderFor(Name), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
	}
	toPass := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{passKey}
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named(Name).
		Watches(&corev1.Node{}, toPass, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return true },
			DeleteFunc: func(event.DeleteEvent) bool { return true },
			// Heartbeats and our own condition patches are not reasons
			// for a pass; a node getting its pod CIDRs is.
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
				return !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs)
			},
			GenericFunc: func(event.GenericEvent) bool { return true },
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(cloud.RequeueOnRetryHint(r))
	if err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	return nil
}

type routeKey struct {
	node string
	cidr string
}

func (r *reconciler) inCluster(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	for _, c := range r.opts.ClusterCIDRs {
		if c.Contains(p.Addr()) && p.Bits() >= c.Bits() {
			return true
		}
	}
	return false
}

// Reconcile makes one full pass.
func (r *reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := klog.FromContext(ctx)
	var list corev1.NodeList
	if err := r.client.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing nodes: %w", err)
	}
	existing, err := r.opts.Routes.ListRoutes(ctx, r.opts.ClusterName)
	if err != nil {
		// Try again later; a throttle already paused every cloud caller.
		return ctrl.Result{}, fmt.Errorf("listing routes: %w", err)
	}

	have := map[routeKey]bool{}
	var stale []*cloudprovider.Route
	nodes := map[string]*corev1.Node{}
	want := map[routeKey]bool{}
	for i := range list.Items {
		n := &list.Items[i]
		nodes[n.Name] = n
		for _, c := range n.Spec.PodCIDRs {
			want[routeKey{n.Name, c}] = true
		}
	}
	for _, rt := range existing {
		k := routeKey{string(rt.TargetNode), rt.DestinationCIDR}
		switch {
		case !r.inCluster(rt.DestinationCIDR):
			// Not ours: never touched.
		case !want[k]:
			stale = append(stale, rt)
		case rt.Blackhole:
			// The node still wants this route but its instance is gone:
			// a new route would be a blackhole too. The lifecycle
			// controller deletes the node, and the route goes with it.
			have[k] = true
		default:
			have[k] = true
		}
	}
	var create []routeKey
	for k := range want {
		if !have[k] {
			create = append(create, k)
		}
	}

	var failedDeletes atomic.Int64
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(stale), func(i int) {
		if err := r.opts.Routes.DeleteRoute(ctx, r.opts.ClusterName, stale[i]); err != nil {
			failedDeletes.Add(1)
			log.Error(err, "Deleting stale route", "route", stale[i].Name, "destination", stale[i].DestinationCIDR)
		}
	})
	var mu sync.Mutex
	failed := map[string]bool{}
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(create), func(i int) {
		k := create[i]
		node := nodes[k.node]
		rt := &cloudprovider.Route{TargetNode: types.NodeName(k.node), DestinationCIDR: k.cidr, TargetNodeAddresses: node.Status.Addresses}
		start := time.Now()
		if err := r.opts.Routes.CreateRoute(ctx, r.opts.ClusterName, string(node.UID), rt); err != nil {
			mu.Lock()
			failed[k.node] = true
			mu.Unlock()
			r.recorder.Eventf(node, corev1.EventTypeWarning, ReasonFailedToCreateRoute,
				"Could not create route %s for node %s after %v: %v", k.cidr, k.node, time.Since(start).Round(time.Millisecond), err)
			return
		}
		mu.Lock()
		have[k] = true
		mu.Unlock()
	})

	// Conditions: every node with pod CIDRs says whether its routes exist.
	var withCIDRs []*corev1.Node
	for _, n := range nodes {
		if len(n.Spec.PodCIDRs) > 0 {
			withCIDRs = append(withCIDRs, n)
		}
	}
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(withCIDRs), func(i int) {
		n := withCIDRs[i]
		ok := !failed[n.Name]
		for _, c := range n.Spec.PodCIDRs {
			ok = ok && have[routeKey{n.Name, c}]
		}
		if err := r.setNetworkCondition(ctx, n, ok); err != nil {
			log.Error(err, "Setting NetworkUnavailable", "node", klog.KObj(n))
		}
	})
	log.V(2).Info("Reconciled routes", "nodes", len(nodes), "routes", len(existing), "created", len(create)-len(failed), "deleted", len(stale)-int(failedDeletes.Load()), "failedNodes", len(failed))
	return ctrl.Result{RequeueAfter: r.opts.Period}, nil
}

// setNetworkCondition writes NetworkUnavailable when it differs from what
// the routes say, with upstream's reasons and messages.
func (r *reconciler) setNetworkCondition(ctx context.Context, n *corev1.Node, routed bool) error {
	want := corev1.NodeCondition{
		Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse,
		Reason: ConditionReasonCreated, Message: "RouteController created a route",
	}
	if !routed {
		want.Status, want.Reason, want.Message = corev1.ConditionTrue, ConditionReasonNotCreated, "RouteController failed to create a route"
	}
	for _, c := range n.Status.Conditions {
		if c.Type == want.Type && c.Status == want.Status && c.Reason == want.Reason {
			return nil
		}
	}
	now := metav1.Now()
	want.LastTransitionTime, want.LastHeartbeatTime = now, now
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{want}}})
	if err != nil {
		return err
	}
	// A strategic merge keyed on the condition type leaves the others alone.
	return client.IgnoreNotFound(r.client.Status().Patch(ctx, n.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, patch)))
}
