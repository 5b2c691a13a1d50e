// Package route is the node-route-controller: one cloud route per node pod
// CIDR (two for a dual-stack node), so pod traffic reaches every node. It
// works from spec.podCIDRs whoever set them (Outrigger's node-ipam-controller,
// kube-controller-manager, or anything else).
//
// It owns the routes whose destination overlaps the cluster CIDRs, as
// upstream decides it, and deletes those of them no node wants (the node is
// gone or its CIDRs changed, or the route targets no node), every blackhole
// (its instance is gone: the next pass creates the route again if the node
// still wants it), and, for a provider that sets EnableNodeAddresses on its
// routes, those whose node addresses changed, which are then created again
// with the node's current addresses. Routes outside the cluster CIDRs are
// never touched. A node whose routes all exist gets the
// NetworkUnavailable=False condition (reason RouteCreated), as upstream sets
// it.
//
// Unlike upstream, which lists and then retries creates in a loop per node
// (k/k#21561: hundreds of thousands of rejected inserts on a 1,000-node
// cluster), every pass is one ListRoutes and exactly the creates and deletes
// the difference needs, made through the cloud-call layer's rate limit; node
// events are coalesced into passes by the work queue, and a failed create is
// retried on the next pass, not in a tight loop. A pass does not wait for its
// creates: the next one (for nodes that came meanwhile) plans while they run,
// and leaves their destinations to them, so creates hung on some nodes do
// not hold the others' routes.
package route

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/controllers/retryhint"
	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "node-route-controller"

// EventSource is the component upstream's route controller writes its
// Events as.
const EventSource = "route_controller"

// Event reasons and condition values, as upstream's.
const (
	ReasonFailedToCreateRoute = "FailedToCreateRoute"
	// ReasonRouteOutsideClusterCIDR is Outrigger's own: a node's pod CIDR
	// outside --cluster-cidr gets no cloud route (it would draw traffic
	// for a range that is not the cluster's, such as a peered network's).
	ReasonRouteOutsideClusterCIDR = "RouteOutsideClusterCIDR"
	// ReasonRouteOverlapsServiceCIDR is Outrigger's own: a node's pod CIDR
	// overlapping a service CIDR gets no cloud route (it would draw the
	// Services' traffic to one node).
	ReasonRouteOverlapsServiceCIDR = "RouteOverlapsServiceCIDR"
	ConditionReasonCreated         = "RouteCreated"
	ConditionReasonNotCreated      = "NoRouteCreated"
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
	// Platforms are the nodes this Outrigger serves: another platform's
	// node gets no route, no condition, and its routes are left alone.
	Platforms platform.Set
	// ServiceCIDRs reads the cluster's ServiceCIDRs (networking.k8s.io/v1)
	// at each pass (one small list: they are few and rarely change); a pod
	// CIDR overlapping one gets no route. Nil, or where they are not
	// served or not readable: routes are checked against ClusterCIDRs
	// only.
	ServiceCIDRs client.Reader
	// Provider names the provider when an Outrigger runs several: the
	// controller's name and the source of its Events end in "/Provider".
	// Empty (one provider): upstream's names.
	Provider string
}

type reconciler struct {
	client client.Client
	// nodes lists the cache's own nodes: a pass reads every node and
	// writes few, so it copies only those it writes (at 50,000 nodes a
	// copied list is about 250 MB of garbage per pass). Nil: read through
	// client (unit tests).
	nodes    cachednodes.Lister
	recorder record.EventRecorder
	opts     Options
	// warned is the refused pod CIDRs each node was told of, so that a
	// node gets its Event once per change, not once per pass.
	warned map[string]string
	// saidNoServiceCIDRs: the log said the service CIDRs cannot be read.
	saidNoServiceCIDRs bool
	// creates are the route creates of every pass.
	creates creates
}

// The two work items, named after upstream's route_sync_total trigger
// label: node events ask for a node_change pass, and the periodic item
// requeues itself every period. The queue folds a burst of either into one
// pass.
const (
	triggerNodeChange = "node_change"
	triggerPeriodic   = "periodic"
)

var (
	nodeChangeKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: triggerNodeChange}}
	periodicKey   = reconcile.Request{NamespacedName: types.NamespacedName{Name: triggerPeriodic}}
)

// Setup adds the controller to mgr. It needs nothing but nodes' pod CIDRs,
// whoever sets them.
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
	name, component := Name, EventSource
	if opts.Provider != "" {
		name, component = name+"/"+opts.Provider, component+"/"+opts.Provider
	}
	r := &reconciler{
		client:   mgr.GetClient(),
		nodes:    cachednodes.FromCache(mgr.GetCache()),
		recorder: mgr.GetEventRecorderFor(component), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
	}
	toPass := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{nodeChangeKey}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		Watches(&corev1.Node{}, toPass, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return true },
			DeleteFunc: func(event.DeleteEvent) bool { return true },
			// Heartbeats and our own condition patches are not reasons
			// for a pass; new pod CIDRs or addresses are (routes may carry
			// the node's addresses).
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, n := e.ObjectOld.(*corev1.Node), e.ObjectNew.(*corev1.Node)
				return !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) || !reflect.DeepEqual(o.Status.Addresses, n.Status.Addresses)
			},
			GenericFunc: func(event.GenericEvent) bool { return true },
		})).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(periodicKey)
			r.creates.mu.Lock()
			r.creates.again = func() { q.Add(nodeChangeKey) }
			r.creates.mu.Unlock()
			return nil
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	err := b.Complete(retryhint.Requeue(r))
	if err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	return nil
}

// Reconcile makes one full pass. Its outcome (route_sync_total) is
// recorded when its creates have ended.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	trigger := req.Name
	err := r.start(ctx, func(changed bool) { recordSync(trigger, changed, nil) })
	if err != nil {
		recordSync(trigger, false, err)
		return ctrl.Result{}, err
	}
	if trigger == triggerPeriodic {
		return ctrl.Result{RequeueAfter: r.opts.Period}, nil
	}
	return ctrl.Result{}, nil
}

// warn records an Event on each node whose refused pod CIDRs (by reason)
// changed since it was last told.
func (r *reconciler) warn(nodes map[string]*corev1.Node, refused map[string][]string, reason string, message func(name, cidrs string) string) {
	for key := range r.warned {
		if name, ok := strings.CutPrefix(key, reason+"/"); ok {
			if _, still := refused[name]; !still {
				delete(r.warned, key)
			}
		}
	}
	for name, cidrs := range refused {
		said := strings.Join(cidrs, ", ")
		key := reason + "/" + name
		if r.warned[key] == said {
			continue
		}
		if r.warned == nil {
			r.warned = map[string]string{}
		}
		r.warned[key] = said
		r.recorder.Event(nodeRef(nodes[name]), corev1.EventTypeWarning, reason, message(name, said))
	}
}

// serviceCIDRs are the cluster's service CIDRs; none where they are not
// served or not readable (said once in the log). Another error fails the
// pass: a route made meanwhile might go where Services are.
func (r *reconciler) serviceCIDRs(ctx context.Context) ([]netip.Prefix, error) {
	if r.opts.ServiceCIDRs == nil {
		return nil, nil
	}
	var list networkingv1.ServiceCIDRList
	err := r.opts.ServiceCIDRs.List(ctx, &list)
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || meta.IsNoMatchError(err):
		if !r.saidNoServiceCIDRs {
			r.saidNoServiceCIDRs = true
			klog.FromContext(ctx).Info("Routes are checked against --cluster-cidr only: the service CIDRs cannot be read", "err", err)
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing service CIDRs: %w", err)
	}
	var out []netip.Prefix
	for _, sc := range list.Items {
		for _, c := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out, nil
}

func (r *reconciler) clusterCIDRs() string {
	out := make([]string, len(r.opts.ClusterCIDRs))
	for i, c := range r.opts.ClusterCIDRs {
		out[i] = c.String()
	}
	return strings.Join(out, ",")
}

// nodeRef is the reference upstream's Events carry: no namespace, no
// resourceVersion.
func nodeRef(node *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
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
