package service

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The service controller's metrics carry upstream's names, labels (none) and
// buckets, so dashboards and alerts written for the upstream CCM keep
// working. They are registered with controller-runtime's registry, which the
// manager serves on /metrics.
var (
	// loadBalancerSyncTotal counts UpdateLoadBalancer calls made because the
	// backend nodes changed; upstream counts exactly those, despite the name.
	loadBalancerSyncTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "service_controller",
		Name:      "loadbalancer_sync_total",
		Help:      "Load balancer backend updates (UpdateLoadBalancer) made because the set of nodes changed.",
	})
	nodeSyncErrorTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "service_controller",
		Name:      "nodesync_error_total",
		Help:      "Load balancer backend updates that failed.",
	})
	nodeSyncLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "service_controller",
		Name:      "nodesync_latency_seconds",
		Help:      "Time from a node change being acted on until every load balancer Service has been brought up to date with it.",
		Buckets:   prometheus.ExponentialBuckets(1, 2, 15),
	})
	updateLoadBalancerHostLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "service_controller",
		Name:      "update_loadbalancer_host_latency_seconds",
		Help:      "Latency of one load balancer backend update (UpdateLoadBalancer).",
		Buckets:   prometheus.ExponentialBuckets(1, 2, 15),
	})
	// orphansDeletedTotal is Outrigger's own: load balancers deleted by the
	// orphan sweep, by tenant (tenant mode; "" for a single cluster), as
	// are the sweeps.
	orphansDeletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_orphan_load_balancers_deleted_total",
		Help: "Load balancers of this cluster and class whose Service no longer exists, deleted by the orphan sweep, by tenant.",
	}, []string{"tenant"})
	// orphanSweepsTotal counts the sweep's passes by result: swept,
	// no_identity (the cluster's identity is not known, so nothing is
	// deleted), failed (listing failed).
	orphanSweepsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_orphan_sweeps_total",
		Help: "Passes of the orphan sweep by tenant and result: swept; no_identity (the cluster's identity could not be read, so nothing is deleted); failed.",
	}, []string{"tenant", "result"})
)

func init() {
	metrics.Registry.MustRegister(loadBalancerSyncTotal, nodeSyncErrorTotal, nodeSyncLatency, updateLoadBalancerHostLatency, orphansDeletedTotal, orphanSweepsTotal)
}

// ForgetTenant deletes the series of tenant's orphan sweeps, once its
// controllers have stopped on this replica: a tenant removed, or taken by
// another replica, leaves no series here that would never move again.
func ForgetTenant(tenant string) {
	orphansDeletedTotal.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	orphanSweepsTotal.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
}
