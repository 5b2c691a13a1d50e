package node

import (
	"context"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
)

// refresher keeps initialized nodes' addresses in step with the cloud. Each
// period it asks about every node at once, which the cloud-call layer turns
// into batch calls of up to provider.MaxBatch nodes when the provider offers
// them, and patches only the nodes whose addresses changed.
type refresher struct {
	client client.Client
	opts   Options
}

// Start implements manager.Runnable; it runs only on the leader.
func (r *refresher) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, r.refresh, r.opts.RefreshPeriod)
	return nil
}

func (r *refresher) refresh(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("address-refresh")
	var list corev1.NodeList
	if err := r.client.List(ctx, &list); err != nil {
		log.Error(err, "Listing nodes")
		return
	}
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		// Tainted nodes belong to the initializing reconciler.
		if !isUninitialized(&list.Items[i]) {
			nodes = append(nodes, &list.Items[i])
		}
	}
	if len(nodes) == 0 {
		return
	}
	start := time.Now()
	statuses := r.opts.Instances.Lookup(ctx, nodes, cloud.NeedMetadata, r.opts.Workers)
	var failed, changed atomic.Int64
	workqueue.ParallelizeUntil(ctx, r.opts.Workers, len(nodes), func(i int) {
		st := statuses[i]
		if st.Err != nil || !st.Exists || st.Metadata == nil {
			failed.Add(1)
			return
		}
		wrote, err := patchAddresses(ctx, r.client, nodes[i], st.Metadata.NodeAddresses)
		if err != nil {
			log.Error(err, "Refreshing node addresses", "node", klog.KObj(nodes[i]))
			return
		}
		if wrote {
			changed.Add(1)
		}
	})
	log.V(2).Info("Refreshed node addresses", "nodes", len(nodes), "changed", changed.Load(), "unanswered", failed.Load(), "duration", time.Since(start))
}
