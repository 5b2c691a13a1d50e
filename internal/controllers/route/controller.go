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
	"sync"
	"sync/atomic"
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

	"github.com/outrigger-ccm/outrigger/internal/cloud"
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

// creates are the route creates passes have handed to their workers. A
// pass returns once it has planned, made its deletes and handed its creates
// over, so that the next pass (nodes that came meanwhile) does not wait for
// creates hung on other nodes; the passes' plans stay one at a time, and
// each leaves alone the destinations an earlier pass's creates are still
// on, or made after its list was taken.
type creates struct {
	mu sync.Mutex
	// running are the destinations whose create a pass has handed over and
	// that has not ended.
	running map[string]bool
	// made are the destinations whose create succeeded, and when: a list
	// taken before that does not show the route.
	made map[string]time.Time
	// slots bound the creates running at once, across passes (Workers).
	slots chan struct{}
	// wg counts the passes' creates until they end.
	wg sync.WaitGroup
	// again asks for a node_change pass; nil until the controller runs.
	again func()
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

// action is what a pass does with one node pod CIDR, as upstream decides it.
type action int

const (
	keep   action = iota // the route exists (a blackhole is deleted all the same)
	add                  // no route: create one
	update               // the route's node addresses are stale: delete and create
)

// plan is what a pass does.
type plan struct {
	// actions has an entry for every node with pod CIDRs (one per CIDR)
	// and an empty one for every node a route targets but that has none.
	actions map[string]map[string]action
	deletes []*cloudprovider.Route
	creates []*cloudprovider.Route
	// refused are the pod CIDRs outside the cluster CIDRs, and
	// overlapping the pod CIDRs that overlap a service CIDR, by node: no
	// route is made for them.
	refused, overlapping map[string][]string
}

func (r *reconciler) plan(nodes []*corev1.Node, routes []*cloudprovider.Route, serviceCIDRs []netip.Prefix) plan {
	p := plan{actions: map[string]map[string]action{}}
	foreign := map[string]bool{}
	for _, n := range nodes {
		if !r.opts.Platforms.Owns(n) {
			foreign[n.Name] = true
		}
	}
	byNode := map[string][]*cloudprovider.Route{}
	for _, rt := range routes {
		if rt.TargetNode == "" || foreign[string(rt.TargetNode)] {
			continue
		}
		n := string(rt.TargetNode)
		byNode[n] = append(byNode[n], rt)
		if p.actions[n] == nil {
			p.actions[n] = map[string]action{}
		}
	}
	for _, n := range nodes {
		if len(n.Spec.PodCIDRs) == 0 || foreign[n.Name] {
			continue
		}
		if p.actions[n.Name] == nil {
			p.actions[n.Name] = map[string]action{}
		}
		for _, cidr := range n.Spec.PodCIDRs {
			if !r.inside(cidr) {
				if p.refused == nil {
					p.refused = map[string][]string{}
				}
				p.refused[n.Name] = append(p.refused[n.Name], cidr)
				// Not routed: the node's NetworkUnavailable says so.
				p.actions[n.Name][cidr] = add
				continue
			}
			if overlaps(cidr, serviceCIDRs) {
				if p.overlapping == nil {
					p.overlapping = map[string][]string{}
				}
				p.overlapping[n.Name] = append(p.overlapping[n.Name], cidr)
				p.actions[n.Name][cidr] = add
				continue
			}
			a := routeAction(byNode[n.Name], cidr, n.Status.Addresses)
			p.actions[n.Name][cidr] = a
			if a != keep {
				p.creates = append(p.creates, &cloudprovider.Route{
					// The provider gets its own addresses: the node is the cache's.
					TargetNode: types.NodeName(n.Name), TargetNodeAddresses: slices.Clone(n.Status.Addresses), DestinationCIDR: cidr,
				})
			}
		}
	}
	for _, rt := range routes {
		if !r.responsible(rt.DestinationCIDR) || foreign[string(rt.TargetNode)] {
			continue
		}
		a, wanted := p.actions[string(rt.TargetNode)][rt.DestinationCIDR]
		if rt.Blackhole || !wanted || a == update {
			p.deletes = append(p.deletes, rt)
		}
	}
	return p
}

// routeAction: a route to the CIDR is kept unless the provider tracks node
// addresses on routes (EnableNodeAddresses) and the node's changed.
func routeAction(routes []*cloudprovider.Route, cidr string, addrs []corev1.NodeAddress) action {
	for _, rt := range routes {
		if rt.DestinationCIDR != cidr {
			continue
		}
		if !rt.EnableNodeAddresses || sameAddresses(addrs, rt.TargetNodeAddresses) {
			return keep
		}
		return update
	}
	return add
}

// sameAddresses compares regardless of order, as upstream does: a provider
// need not return them in the order they were given.
func sameAddresses(a, b []corev1.NodeAddress) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x corev1.NodeAddress) bool { return !slices.Contains(b, x) })
}

// responsible reports whether a route's destination overlaps a cluster CIDR
// (its first or last address is inside one), upstream's test of ownership.
func (r *reconciler) responsible(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	p = p.Masked()
	first, last := p.Addr(), lastAddr(p)
	for _, c := range r.opts.ClusterCIDRs {
		if c.Contains(first) || c.Contains(last) {
			return true
		}
	}
	return false
}

// inside reports whether a pod CIDR lies wholly inside a cluster CIDR: the
// only destinations a route is made for.
func (r *reconciler) inside(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	p = p.Masked()
	for _, c := range r.opts.ClusterCIDRs {
		if c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
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

// overlaps reports whether cidr shares an address with one of prefixes.
func overlaps(cidr string, prefixes []netip.Prefix) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(prefixes, func(s netip.Prefix) bool { return s.Overlaps(p.Masked()) })
}

func prefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}

// pass is a pass that returns when its creates have ended. changed reports
// whether a route was created or deleted.
func (r *reconciler) pass(ctx context.Context) (changed bool, err error) {
	done := make(chan bool, 1)
	if err := r.start(ctx, func(changed bool) { done <- changed }); err != nil {
		return false, err
	}
	return <-done, nil
}

// start lists nodes and routes, makes the deletes the plan says, hands its
// creates to the workers and sets the NetworkUnavailable condition of every
// concerned node without a create; a node with creates gets it when its
// last create ends. ended is called once the pass's creates have ended,
// with whether a route was created or deleted.
func (r *reconciler) start(ctx context.Context, ended func(changed bool)) error {
	log := klog.FromContext(ctx)
	lister := r.nodes
	if lister == nil {
		lister = cachednodes.FromReader(r.client)
	}
	list, err := lister(ctx)
	if err != nil {
		return err
	}
	listed := time.Now()
	existing, err := r.opts.Routes.ListRoutes(ctx, r.opts.ClusterName)
	if err != nil {
		// Try again at the next pass; a throttled route waits for its hint.
		return fmt.Errorf("listing routes: %w", err)
	}
	serviceCIDRs, err := r.serviceCIDRs(ctx)
	if err != nil {
		return err
	}
	p := r.plan(list, existing, serviceCIDRs)
	deferred := r.creates.claim(&p, listed)
	nodes := make(map[string]*corev1.Node, len(list))
	for _, n := range list {
		nodes[n.Name] = n
	}

	r.warn(nodes, p.refused, ReasonRouteOutsideClusterCIDR, func(name, cidrs string) string {
		return fmt.Sprintf("Not creating a route for pod CIDRs %s of node %s: outside --cluster-cidr %s", cidrs, name, r.clusterCIDRs())
	})
	r.warn(nodes, p.overlapping, ReasonRouteOverlapsServiceCIDR, func(name, cidrs string) string {
		return fmt.Sprintf("Not creating a route for pod CIDRs %s of node %s: they overlap the cluster's service CIDRs %s", cidrs, name, prefixes(serviceCIDRs))
	})

	var deleted atomic.Int64
	// Deletes first, within the pass: an updated route is deleted before
	// it is created again, and a destination is freed before another
	// route to it is made.
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(p.deletes), func(i int) {
		rt := p.deletes[i]
		// The next pass's ListRoutes shows what a delete did: one that
		// straggles is left to run, so that calls hung on some routes do
		// not hold the pass, and with it every other node's routes.
		if err := r.opts.Routes.DeleteRoute(cloud.Relisted(ctx), r.opts.ClusterName, rt); err != nil {
			if cloud.Reason(err) == cloud.ReasonCallInFlight {
				// Still running: the next pass sees whether it went.
				log.V(2).Info("Route delete still running", "route", rt.Name, "destination", rt.DestinationCIDR)
				return
			}
			log.Error(err, "Deleting route", "route", rt.Name, "destination", rt.DestinationCIDR, "node", rt.TargetNode, "blackhole", rt.Blackhole)
			return
		}
		deleted.Add(1)
		log.V(2).Info("Deleted route", "route", rt.Name, "destination", rt.DestinationCIDR, "node", rt.TargetNode, "blackhole", rt.Blackhole)
	})

	run := &passRun{r: r, nodes: nodes, actions: p.actions, deferred: deferred, pending: map[string]int{}, left: len(p.creates)}
	run.deleted = deleted.Load()
	run.ended = func(created int64) {
		log.V(2).Info("Reconciled routes", "nodes", len(nodes), "routes", len(existing),
			"created", created, "failedCreates", len(p.creates)-int(created),
			"deleted", run.deleted, "failedDeletes", len(p.deletes)-int(run.deleted))
		ended(created+run.deleted > 0)
	}
	for _, rt := range p.creates {
		run.pending[string(rt.TargetNode)]++
	}

	// Conditions: every other node with pod CIDRs, or that a route
	// targets, says whether its routes exist; a node whose destination
	// another pass's create is on is left to that create.
	var concerned []*corev1.Node
	for name := range p.actions {
		if n, ok := nodes[name]; ok && run.pending[name] == 0 && !deferred[name] {
			concerned = append(concerned, n)
		}
	}
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(concerned), func(i int) {
		n := concerned[i]
		if err := r.setNetworkCondition(ctx, n, routed(p.actions[n.Name])); err != nil {
			log.Error(err, "Setting NetworkUnavailable", "node", klog.KObj(n))
		}
	})
	if len(p.creates) == 0 {
		run.ended(0)
		return nil
	}
	r.creates.wg.Add(1)
	go func() {
		defer r.creates.wg.Done()
		slots := r.creates.workers(r.opts.Workers)
		for i, rt := range p.creates {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				// Stopping: the creates not yet sent are not made.
				for _, rt := range p.creates[i:] {
					run.create(ctx, rt, ctx.Err())
				}
				return
			}
			r.creates.wg.Add(1)
			go func() {
				defer func() {
					<-slots
					r.creates.wg.Done()
				}()
				node := nodes[string(rt.TargetNode)]
				start := time.Now()
				// A create left running (it straggles; the next list shows
				// what it did) keeps its destination until the provider
				// returns: passes meanwhile leave it alone rather than
				// having their creates refused, and the one after it reads
				// the route.
				cidr := rt.DestinationCIDR
				failed := func(err error) {
					r.recorder.Eventf(nodeRef(node), corev1.EventTypeWarning, ReasonFailedToCreateRoute,
						"Could not create route %s %s for node %s after %v: %v", node.UID, cidr, node.Name, time.Since(start).Round(time.Millisecond), err)
				}
				callCtx := cloud.WhenDetachedReturns(cloud.Relisted(ctx), func() { r.creates.returned(cidr) })
				// Left running, it still times out as a waited-for call
				// would: the node hears of it.
				callCtx = cloud.WhenDetachedTimesOut(callCtx, failed)
				err := r.opts.Routes.CreateRoute(callCtx, r.opts.ClusterName, string(node.UID), rt)
				if err != nil && cloud.Reason(err) != cloud.ReasonCallInFlight && ctx.Err() == nil {
					failed(err)
				}
				run.create(ctx, rt, err)
			}()
		}
	}()
	return nil
}

// passRun is a pass whose creates are running.
type passRun struct {
	r       *reconciler
	nodes   map[string]*corev1.Node
	deleted int64
	ended   func(created int64)

	mu sync.Mutex
	// actions is the pass's plan, updated as its creates succeed.
	actions map[string]map[string]action
	// deferred are the nodes with a destination another pass's create was
	// on when this one planned.
	deferred map[string]bool
	// pending counts each node's creates that have not ended.
	pending map[string]int
	left    int
	created int64
}

// create records the end of the create of rt, with err: a node whose
// creates have all ended gets its condition, and the pass ends with its
// last create.
func (run *passRun) create(ctx context.Context, rt *cloudprovider.Route, err error) {
	name := string(rt.TargetNode)
	if !errors.Is(err, cloud.ErrStillRunning) {
		run.r.creates.end(rt.DestinationCIDR, err == nil)
	}
	run.mu.Lock()
	if err == nil {
		run.actions[name][rt.DestinationCIDR] = keep
		run.created++
	}
	run.pending[name]--
	last := run.pending[name] == 0
	isRouted := routed(run.actions[name])
	deferred := run.deferred[name]
	run.left--
	finished, created := run.left == 0, run.created
	run.mu.Unlock()

	switch {
	case !last || ctx.Err() != nil:
	case !isRouted && err == nil:
		// The node's other routes failed, or another pass's create is
		// on one: a pass that sees this route settles its condition.
		run.r.creates.passAgain()
	case !deferred:
		if err := run.r.setNetworkCondition(ctx, run.nodes[name], isRouted); err != nil {
			klog.FromContext(ctx).Error(err, "Setting NetworkUnavailable", "node", klog.KObj(run.nodes[name]))
		}
	}
	if finished {
		run.ended(created)
	}
}

// claim takes the plan's creates for this pass: those of a destination
// another pass's create is still on are left to it (their nodes are
// returned, deferred), and a destination whose create succeeded after the
// list was taken is routed. The deletes of such destinations are dropped:
// the list may show the route their create replaced.
func (c *creates) claim(p *plan, listed time.Time) (deferred map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cidr, at := range c.made {
		if at.Before(listed) {
			delete(c.made, cidr)
		}
	}
	p.deletes = slices.DeleteFunc(p.deletes, func(rt *cloudprovider.Route) bool {
		_, made := c.made[rt.DestinationCIDR]
		return made || c.running[rt.DestinationCIDR]
	})
	deferred = map[string]bool{}
	var claimed []*cloudprovider.Route
	for _, rt := range p.creates {
		name, cidr := string(rt.TargetNode), rt.DestinationCIDR
		if c.running[cidr] {
			deferred[name] = true
			continue
		}
		if _, made := c.made[cidr]; made {
			p.actions[name][cidr] = keep
			continue
		}
		if c.running == nil {
			c.running = map[string]bool{}
		}
		c.running[cidr] = true
		claimed = append(claimed, rt)
	}
	p.creates = claimed
	return deferred
}

// end records that the create of cidr ended, and whether it made the
// route.
func (c *creates) end(cidr string, made bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, cidr)
	if made {
		if c.made == nil {
			c.made = map[string]time.Time{}
		}
		c.made[cidr] = time.Now()
	}
}

// returned records that a create left running has returned: a pass reads
// what it did.
func (c *creates) returned(cidr string) {
	c.mu.Lock()
	delete(c.running, cidr)
	c.mu.Unlock()
	c.passAgain()
}

// workers is the semaphore of the creates running at once.
func (c *creates) workers(n int) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slots == nil {
		c.slots = make(chan struct{}, n)
	}
	return c.slots
}

func (c *creates) passAgain() {
	c.mu.Lock()
	again := c.again
	c.mu.Unlock()
	if again != nil {
		again()
	}
}

// routed tells whether a node's routes all exist: it has some, and every
// one is kept.
func routed(actions map[string]action) bool {
	if len(actions) == 0 {
		return false
	}
	for _, a := range actions {
		if a != keep {
			return false
		}
	}
	return true
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
