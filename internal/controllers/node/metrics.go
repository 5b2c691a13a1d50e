package node

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Upstream's cloud-node-controller metrics, with its names and buckets, so
// dashboards built for it work unchanged. They are registered with
// controller-runtime's registry, which the manager serves on /metrics.
var (
	taintRemovalDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "node_controller_cloud_provider_taint_removal_delay_seconds",
		Help:    "Seconds from a node's creation until the cloud-node-controller removed its uninitialized taint.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 6),
	})
	initialSyncDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "node_controller_initial_node_sync_delay_seconds",
		Help:    "Seconds from a node's creation until the cloud-node-controller finished initializing it.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 6),
	})
)

func init() {
	metrics.Registry.MustRegister(taintRemovalDelay, initialSyncDelay)
}
