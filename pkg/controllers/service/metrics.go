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
)

func init() {
	metrics.Registry.MustRegister(loadBalancerSyncTotal, nodeSyncErrorTotal, nodeSyncLatency, updateLoadBalancerHostLatency)
}
