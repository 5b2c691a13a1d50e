package route

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
)

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
