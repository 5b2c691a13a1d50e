package provider

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// BatchInstances is an optional interface for a provider's InstancesV2
// value: it answers for many nodes in one cloud API call. Outrigger uses it
// for initialization, the periodic address refresh and the lifecycle check,
// so a cluster of thousands of nodes costs a handful of cloud calls per
// period rather than one per node. A provider that does not implement it is
// called node by node through InstancesV2.
type BatchInstances interface {
	// InstancesStatus returns one status per node, in the order given. An
	// error for the whole call (throttling, an outage) is returned as err;
	// a problem with one node only is that node's InstanceStatus.Err.
	// Outrigger never passes more than MaxBatch nodes.
	InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]InstanceStatus, error)
}

// MaxBatch is the most nodes Outrigger hands a provider in one
// InstancesStatus call.
const MaxBatch = 500

// InstanceStatus is what the cloud knows of one node's instance.
type InstanceStatus struct {
	// Exists is false only when the cloud positively reports the instance
	// gone (terminated or unknown). Never false because of an error.
	Exists bool
	// Shutdown is true when the instance exists but is stopped.
	Shutdown bool
	// Metadata is set when Exists (and the lookup asked for metadata).
	Metadata *cloudprovider.InstanceMetadata
	// Err is set when the cloud could not tell for this node.
	Err error
}

// NodeCIDRSource is an optional interface for a provider (the
// cloudprovider.Interface value itself): the cloud decides each node's pod
// CIDRs, as clouds with native pod networking (alias IP ranges, prefix
// delegation) do. It backs --cidr-allocator-type=CloudAllocator.
type NodeCIDRSource interface {
	// NodeCIDRs returns the pod CIDRs the cloud assigned to the node's
	// instance, at most one IPv4 and one IPv6, assigning them first if
	// needed. Calling it again for the same instance returns the same CIDRs.
	NodeCIDRs(ctx context.Context, node *corev1.Node) ([]string, error)
}

// Platforms is an optional interface for a provider (the
// cloudprovider.Interface value): the providerID schemes (the part before
// "://", KEP-5778's platforms) of the nodes it serves, such as "aws".
// Outrigger refuses to start when --cloud-provider-platforms names a scheme
// the provider says it does not serve.
type Platforms interface {
	Platforms() []string
}

// LoadBalancerOwnership is an optional interface for a provider's
// LoadBalancer value: each load balancer records in the cloud (its tags or
// its name) what it was made for, so that who owns it survives restarts and
// is never inferred from a name alone. With it, Outrigger deletes the load
// balancer of a Service whose class moved away while Outrigger was down,
// but only when the record says Outrigger's class made it; without it,
// Outrigger leaves such a load balancer alone.
type LoadBalancerOwnership interface {
	// LoadBalancerOwner returns the ownership record of the load balancer
	// the provider would use for service, and false when there is none
	// under that name. A load balancer without a record is returned with
	// an empty LoadBalancerOwner: it is nobody's that Outrigger can prove.
	LoadBalancerOwner(ctx context.Context, clusterName string, service *corev1.Service) (LoadBalancerOwner, bool, error)
	// ListLoadBalancerOwners lists the load balancers whose record names
	// clusterName, with their records: Outrigger's orphan sweep deletes
	// those whose Service no longer exists.
	ListLoadBalancerOwners(ctx context.Context, clusterName string) ([]OwnedLoadBalancer, error)
}

// OwnedLoadBalancer is a load balancer and its ownership record.
type OwnedLoadBalancer struct {
	// Name is the cloud's name for it.
	Name string
	LoadBalancerOwner
	// ServiceNamespace and ServiceName name the Service it was made for,
	// when the record keeps them (for Events and logs).
	ServiceNamespace, ServiceName string
}

// LoadBalancerOwner is what a load balancer was made for.
type LoadBalancerOwner struct {
	// ClusterName is the --cluster-name of the CCM that made it.
	ClusterName string
	// ClusterID is the identity of the cluster that made it (see
	// ClusterIdentity); "" for a record written before the provider knew
	// it, which proves nothing about the cluster.
	ClusterID string
	// ServiceUID is the UID of the Service it was made for.
	ServiceUID types.UID
	// Class is the Service's spec.loadBalancerClass when it was made: ""
	// for a Service without a class.
	Class string
}

// Owns reports whether the record names the given cluster, Service and
// class: the only proof that a load balancer is theirs. The Service's UID
// makes it one cluster's (UIDs are unique), so this is the proof for a
// Service that exists; for one that does not, see OfCluster.
func (o LoadBalancerOwner) Owns(clusterName string, uid types.UID, class string) bool {
	return o.ClusterName != "" && o.ServiceUID != "" &&
		o.ClusterName == clusterName && o.ServiceUID == uid && o.Class == class
}

// OfCluster reports whether the record carries the cluster identity id. A
// load balancer whose Service no longer exists is this cluster's to delete
// only then: a cluster name alone is shared by every cluster left at the
// default, and a record without an identity may be any cluster's.
func (o LoadBalancerOwner) OfCluster(id string) bool {
	return id != "" && o.ClusterID == id
}

// ClusterIdentity is an optional interface for a provider (the
// cloudprovider.Interface value): Outrigger tells it the cluster's
// identity before any controller runs, once the provider is initialized,
// and the provider records it on everything it makes (beside the cluster
// name it is passed in every call). The identity is the UID of the
// kube-system namespace, which nobody configures and no other cluster has
// (OpenTelemetry's k8s.cluster.uid), or, on a control plane marked as a
// restored copy of another, an identity derived from it. Outrigger deletes
// a load balancer whose Service no longer exists, and a provider lists
// routes for cleanup, only when the record carries this identity.
//
// When the identity could not be read at start (reading kube-system
// refused for longer than the lease duration), the provider runs without
// one and SetClusterID is called later, once it is read, while calls run:
// it must be safe for concurrent use, and what the provider makes after it
// carries the identity.
type ClusterIdentity interface {
	SetClusterID(id string)
}
