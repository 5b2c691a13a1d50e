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
	// orphan sweep.
	orphansDeletedTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outrigger_orphan_load_balancers_deleted_total",
		Help: "Load balancers of this cluster and class whose Service no longer exists, deleted by the orphan sweep.",
	})
	// orphanSweepsTotal counts the sweep's passes by result: swept,
	// no_identity (the cluster's identity is not known, so nothing is
	// deleted), failed (listing failed).
	orphanSweepsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_orphan_sweeps_total",
		Help: "Passes of the orphan sweep by result: swept; no_identity (the cluster's identity could not be read, so nothing is deleted); failed.",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(loadBalancerSyncTotal, nodeSyncErrorTotal, nodeSyncLatency, updateLoadBalancerHostLatency, orphansDeletedTotal, orphanSweepsTotal)
}
