// Package tenants serves many clusters from one Outrigger: it reads the
// tenant clusters Outrigger is given (kubeconfig Secrets selected by label in
// one namespace of the management cluster, and a directory of kubeconfig
// files), spreads them over Outrigger's replicas with one coordination.k8s.io
// Lease per tenant in that namespace, and runs each tenant this replica holds
// through a start function the manager supplies (the same controllers a
// single-cluster Outrigger runs, against the tenant's API server).
//
// Beyond upstream, which runs one cloud-controller-manager per cluster:
// replicas count each other through small member Leases and claim at most
// their share of the tenants (decide, a pure function), so load is bounded
// per replica and moves to a new replica; a tenant whose kubeconfig is
// malformed or whose API server cannot be reached, or that names a cluster
// another tenant already serves, waits alone with backoff and is reported
// by an Event on its Secret. Nothing in the cloud is deleted when a tenant
// stops: its controllers simply stop.
//
// Files: tenant.go (what a tenant is, read from a Secret or a file),
// decide.go (which tenants this replica claims, keeps and releases),
// leases.go (the Leases as the API stores them), runner.go (one tenant's
// run, retried with backoff), reconciler.go (the loop acting on decide),
// status.go (every tenant's state as this replica sees it, for the
// console), metrics.go (by tenant).
package tenants
