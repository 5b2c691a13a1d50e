// Package cloud is the one layer every controller call to a provider goes
// through. It adds, once and for every provider, what a cloud API needs from
// a well-behaved client: a per-call timeout that also frees the caller when a
// provider ignores its context, a client-side rate limit, a pause of all
// callers when the cloud throttles, and Prometheus metrics per method.
//
// It also defines BatchInstances, the optional interface a provider offers to
// answer many nodes in one cloud call, and Lookup, which uses it when present
// and falls back to the standard per-node InstancesV2 calls when not.
package cloud
