// Package cloud is the call layer: the one path every controller call to a
// provider goes through. It adds, once and for every provider, what a cloud
// API needs from a well-behaved client: at most one call in flight per
// object (a Service, a node, a route), a per-call timeout that also frees the
// caller when a provider ignores its context, limits that adapt to what the
// cloud accepts (per method family; --cloud-qps as a hard ceiling when set),
// a slowdown of one method family when the cloud throttles many of its
// objects, answers about a node shared between the controllers that ask,
// and Prometheus metrics per method. A retry hint from the cloud is for the
// one object that got it: the controllers' retryhint.Requeue requeues that
// object after the hint.
//
// Tenants of one cloud account (tenant mode, package tenants) share one
// Account: the account's --cloud-qps, handed out in turn by tenant so that
// none starves another (account.go).
//
// This package is the front: the Layer and its Options, the typed wrappers
// (Instances, LoadBalancer, Routes, NodeCIDRs) that turn each provider
// method into one call, the reasons, and the metrics. Behind it,
// internal/admission decides whether and when a call may go (holds, slots,
// foreground before background, each family's adaptive concurrency and
// rate), and internal/sharing keeps a question from costing more than one
// call (answers shared within a window, one call for callers asking at
// once, batches, and an initialization's answer kept for the address
// refresh).
//
// What a provider implements, and the optional interfaces it may offer, are
// in package provider; Lookup uses provider.BatchInstances when the provider
// offers it and falls back to the standard per-node InstancesV2 calls when
// not.
package cloud
