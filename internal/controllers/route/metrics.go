package route

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Upstream's route controller metric, with its name and labels, registered
// with controller-runtime's registry.
var syncTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "route_controller_route_sync_total",
	Help: "Route passes, by what triggered them (periodic or node_change) and their outcome (changed: a route was created or deleted; noop; error: the pass failed).",
}, []string{"outcome", "trigger"})

func init() {
	metrics.Registry.MustRegister(syncTotal)
}

func recordSync(trigger string, changed bool, err error) {
	outcome := "noop"
	switch {
	case err != nil:
		outcome = "error"
	case changed:
		outcome = "changed"
	}
	syncTotal.WithLabelValues(outcome, trigger).Inc()
}
