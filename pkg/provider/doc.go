// Package provider is the provider-facing contract: everything a provider
// author needs beyond the standard k8s.io/cloud-provider interface, and
// nothing about how Outrigger calls a provider (that is package cloud, the
// call layer).
//
// It holds:
//   - the optional interfaces a provider may offer: BatchInstances (many
//     nodes in one cloud call) and NodeCIDRSource (the cloud assigns pod
//     CIDRs);
//   - WithReason and the Reason words a provider classifies its errors with,
//     and RetryAfter, which reads a cloud's retry hint the way Outrigger does;
//   - InstancesV2, which presents a provider with only the older Instances
//     interface as InstancesV2, as upstream's controllers treat it;
//   - Registry, which maps --cloud-provider names to factories.
//
// A provider that implements only k8s.io/cloud-provider needs none of it.
package provider
