package tenants

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The tenant metrics, registered with controller-runtime's registry, which
// the secure port serves on /metrics. Labelled by tenant: a platform
// watches one tenant, or counts those not served.
var (
	tenantServing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_tenant_serving",
		Help: "1 while this replica runs the tenant's controllers; 0 while it holds the tenant but waits (connecting, or retrying after a failure). Absent for tenants other replicas hold.",
	}, []string{"tenant"})
	tenantFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_tenant_failures_total",
		Help: "Times a tenant could not be served or stopped with an error on this replica, by tenant and reason (the Event reason on its Secret).",
	}, []string{"tenant", "reason"})
	tenantLeases = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "outrigger_tenant_leases_held",
		Help: "Tenant Leases this replica holds.",
	})
)

func init() {
	metrics.Registry.MustRegister(tenantServing, tenantFailures, tenantLeases)
}
