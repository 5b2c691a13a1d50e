// Package node is the cloud-node-controller. It initializes every node a
// kubelet registered with --cloud-provider=external (the nodes carrying the
// node.cloudprovider.kubernetes.io/uninitialized taint): providerID, the
// instance-type, zone and region labels, the provider's additional labels,
// the node's addresses, then the taint removed and a Synced Event. It then
// keeps every node's addresses current with a periodic refresh that asks the
// cloud about all nodes in a few batch calls when the provider offers them.
//
// The on-cluster result is the upstream cloud-node-controller's, so a cluster
// can switch between the two without a node changing.
package node
