package nodelifecycle

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Upstream's cloud-node-lifecycle-controller metrics, with its names, labels
// and buckets, registered with controller-runtime's registry.
var (
	monitorDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds",
		Help:    "Seconds one pass of the cloud-node-lifecycle-controller over all nodes took.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})
	cloudCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cloud_node_lifecycle_controller_cloud_provider_calls_total",
		Help: "Questions the cloud-node-lifecycle-controller asked the cloud provider about nodes, by operation and result.",
	}, []string{"operation", "result"})
)

// Operation label values, as upstream's.
const (
	opInstanceExists   = "instance_exists"
	opInstanceShutdown = "instance_shutdown"
)

func init() {
	metrics.Registry.MustRegister(monitorDuration, cloudCalls)
}

// observeCall counts one answer with upstream's result values.
func observeCall(op string, err error) {
	result := "success"
	switch {
	case errors.Is(err, cloudprovider.NotImplemented):
		result = "not_implemented"
	case errors.Is(err, cloudprovider.InstanceNotFound):
		result = "instance_not_found"
	case errors.Is(err, context.Canceled):
		result = "canceled"
	case err != nil:
		result = "error"
	}
	cloudCalls.WithLabelValues(op, result).Inc()
}
