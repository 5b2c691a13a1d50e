// Package node is the cloud-node-controller. It initializes every node a
// kubelet registered with --cloud-provider=external (the nodes carrying the
// node.cloudprovider.kubernetes.io/uninitialized taint): providerID, the
// instance-type, zone and region labels, the provider's additional labels,
// the node's addresses, then the taint removed and a Synced Event. A node the
// provider gives no provider ID keeps the taint (retried with backoff, a
// SyncFailed Event), except for a provider with only the older Instances
// interface and no instance IDs, whose nodes are found by name, as upstream
// does. On initialized nodes it copies each beta topology label
// (failure-domain.beta.kubernetes.io/zone and region,
// beta.kubernetes.io/instance-type) to its GA label when that is missing or
// differs, as upstream's label reconciliation does. It then
// keeps every node's addresses current with a periodic refresh that asks the
// cloud about all nodes in a few batch calls when the provider offers them.
//
// The on-cluster result is the upstream cloud-node-controller's, so a cluster
// can switch between the two without a node changing.
package node
