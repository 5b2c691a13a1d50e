package node

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/apilimits"
	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// refresher keeps initialized nodes' addresses in step with the cloud. Each
// period it asks about every node at once, which the cloud-call layer turns
// into batch calls of up to provider.MaxBatch nodes when the provider offers
// them (and answers itself for the nodes initialized within the period),
// and patches only the nodes whose addresses changed.
type refresher struct {
	client client.Client
	// nodes lists the cache's own nodes: a pass holds its list for most of
	// the period, and a copy would double the memory the node cache takes.
	nodes cachednodes.Lister
	opts  Options
	// controller is the node controller's name, for its metrics.
	controller string
}

// Start implements manager.Runnable; it runs only on the leader.
func (r *refresher) Start(ctx context.Context) error {
	uninitializedNodes.add(ctx, r, uninitializedSource{tenant: r.opts.Tenant, controller: r.controller, nodes: r.nodes, platforms: r.opts.Platforms})
	// Non-sliding: a pass spread over most of the period starts again one
	// period after it started, not one period after it ended.
	wait.NonSlidingUntilWithContext(ctx, r.refresh, r.opts.RefreshPeriod)
	return nil
}

func (r *refresher) refresh(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("address-refresh")
	all, err := r.nodes(ctx)
	if err != nil {
		log.Error(err, "Listing nodes")
		return
	}
	nodes := all[:0]
	for _, n := range all {
		switch {
		case isUninitialized(n):
			// Tainted nodes belong to the initializing reconciler.
		case !r.opts.Platforms.Owns(n):
			// Another platform's node: not ours to write to.
		default:
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return
	}
	// The same order every pass, so each node is asked one period after
	// the last time. The cache lists in no set order: a node asked at the
	// end of one pass and at the start of the next would get the answer
	// shared from a moment before, and its addresses would next be asked
	// for nearly two periods later.
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	start := time.Now()
	var failed, changed atomic.Int64
	// A periodic pass: initializing nodes goes first when the cloud's
	// rate is short.
	cloudCtx := cloud.Background(ctx)
	r.spread(ctx, len(nodes), func(lo, hi int) {
		statuses := r.opts.Instances.Lookup(cloudCtx, nodes[lo:hi], cloud.NeedMetadata)
		for i, st := range statuses {
			node := nodes[lo+i]
			if st.Err != nil || !st.Exists || st.Metadata == nil {
				failed.Add(1)
				continue
			}
			wrote, err := refreshAddresses(ctx, r.client, node, st.Metadata.NodeAddresses)
			if err != nil {
				log.Error(err, "Refreshing node addresses", "node", klog.KObj(node))
				continue
			}
			if wrote {
				changed.Add(1)
			}
		}
	})
	log.V(2).Info("Refreshed node addresses", "nodes", len(nodes), "changed", changed.Load(), "unanswered", failed.Load(), "duration", time.Since(start))
}

// spreadShare is the part of the period a pass is spread over, leaving the
// rest for the slowest answers before the next pass starts.
const spreadShare = 0.8

// minSpreadTick is the shortest interval between two groups of a pass; with
// more nodes than that allows, each tick takes several. Every tick wakes the
// idle process, and its calls' answers wake it again: that, not the calls,
// is most of a quiet cluster's CPU (a pass over 1,000 nodes with 20 ms calls
// cost 162 ms of CPU at four ticks a second, 68 ms at one, 6 ms all at
// once). A second is the span a cloud's limits are counted in (calls per
// second), so spreading finer buys the cloud nothing.
const minSpreadTick = time.Second

// spread calls fn for consecutive ranges of n nodes, started at even
// intervals over spreadShare of the refresh period, at most Workers at a
// time, and returns when all have returned. A range is one batch call's
// worth of nodes when the provider answers in batches, else as many nodes
// as one tick takes.
func (r *refresher) spread(ctx context.Context, n int, fn func(lo, hi int)) {
	per := 1
	if r.opts.Instances.SupportsBatch() {
		per = provider.MaxBatch
	}
	groups := (n + per - 1) / per
	over := time.Duration(float64(r.opts.RefreshPeriod) * spreadShare)
	tick := over / time.Duration(groups)
	if tick < minSpreadTick {
		// Several groups per tick, as many as keep the ticks minSpreadTick
		// apart.
		tick = max(tick, 1)
		per *= int((minSpreadTick + tick - 1) / tick)
		groups = (n + per - 1) / per
		tick = over / time.Duration(groups)
	}
	sem := make(chan struct{}, max(1, r.opts.Workers))
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	for g := range groups {
		if wait := time.Until(start.Add(time.Duration(g) * tick)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		lo, hi := g*per, min(n, (g+1)*per)
		wg.Go(func() {
			defer func() { <-sem }()
			fn(lo, hi)
		})
	}
	wg.Wait()
}

// refreshAddresses patches node's addresses when the cloud's differ. node is
// the cache's object: it is copied before the patch, which decodes the
// answer into the object it is given.
func refreshAddresses(ctx context.Context, c client.Client, node *corev1.Node, cloudAddrs []corev1.NodeAddress) (bool, error) {
	want, refused, ok, err := desiredAddresses(node, cloudAddrs)
	if len(refused) > 0 {
		klog.FromContext(ctx).Info("Left out node addresses the API does not accept", "node", klog.KObj(node), "refused", apilimits.Summary(refused))
	}
	if err != nil || !ok || addressesEqual(node.Status.Addresses, want) {
		return false, err
	}
	return patchAddresses(ctx, c, node.DeepCopy(), cloudAddrs)
}
