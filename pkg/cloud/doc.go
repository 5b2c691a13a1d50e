// Package cloud is the call layer: the one path every controller call to a
// provider goes through. It adds, once and for every provider, what a cloud
// API needs from a well-behaved client: at most one call in flight per
// object (a Service, a node, a route), a per-call timeout that also frees the
// caller when a provider ignores its context, limits that adapt to what the
// cloud accepts (per method family; --cloud-qps as a hard ceiling when set),
// a slowdown of one method family when the cloud throttles many of its
// objects, and Prometheus metrics per method. A retry hint from the cloud is
// for the one object that got it: the controllers' retryhint.Requeue requeues that object
// after the hint.
//
// What a provider implements, and the optional interfaces it may offer, are
// in package provider; Lookup uses provider.BatchInstances when the provider
// offers it and falls back to the standard per-node InstancesV2 calls when
// not.
package cloud
