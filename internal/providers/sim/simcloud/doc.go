// Package simcloud is the simulated cloud's server: its state (instances,
// routes, load balancers with VIPs from a pool, pod CIDRs), its HTTP API
// (package simapi's types and client) and its behaviour knobs (latency,
// throttling, injected errors, hangs, quotas), which `outrigger sim serve`,
// `outrigger dev`, the integration tests and the chaos harness run.
//
// It is the generic cloud only. APIs in a provider's own terms are served
// over it from other packages through a small exported surface: package
// awsemu's EC2, ELB and metadata service use Region, Zones, Gate (calls
// counted and faulted as the cloud's own), ChangeLabels, ListenAndServe, and
// the provider data a load balancer can carry (providerdata.go), so that
// what they make is the cloud's one object.
package simcloud
