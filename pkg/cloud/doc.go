// Package cloud is the one layer every controller call to a provider goes
// through. It adds, once and for every provider, what a cloud API needs from
// a well-behaved client: at most one call in flight per object (a Service,
// a node, a route), a per-call timeout that also frees the caller when a
// provider ignores its context, a client-side rate limit, a slowdown of one
// method family when the cloud throttles many of its objects, and Prometheus
// metrics per method. A retry hint from the cloud is for the one object that
// got it: RequeueOnRetryHint requeues that object after the hint.
//
// It also defines BatchInstances, the optional interface a provider offers to
// answer many nodes in one cloud call, and Lookup, which uses it when present
// and falls back to the standard per-node InstancesV2 calls when not.
package cloud
