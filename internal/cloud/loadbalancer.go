package cloud

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// LoadBalancer returns the provider's load balancer interface behind the
// layer, or false when the provider has none.
func (l *Layer) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	lb, ok := l.provider.LoadBalancer()
	if !ok || lb == nil {
		return nil, false
	}
	w := loadBalancer{l, lb}
	if owners, ok := lb.(provider.LoadBalancerOwnership); ok {
		return ownedLoadBalancer{w, owners}, true
	}
	return w, true
}

// ownedLoadBalancer is a loadBalancer whose provider records ownership: it
// offers provider.LoadBalancerOwnership behind the layer too.
type ownedLoadBalancer struct {
	loadBalancer
	owners provider.LoadBalancerOwnership
}

func (b ownedLoadBalancer) ListLoadBalancerOwners(ctx context.Context, clusterName string) ([]provider.OwnedLoadBalancer, error) {
	return do(ctx, b.layer, call{"ListLoadBalancerOwners", FamilyLoadBalancers, ""}, func(ctx context.Context) ([]provider.OwnedLoadBalancer, error) {
		return b.owners.ListLoadBalancerOwners(ctx, clusterName)
	})
}

type lbOwner struct {
	owner  provider.LoadBalancerOwner
	exists bool
}

func (b ownedLoadBalancer) LoadBalancerOwner(ctx context.Context, clusterName string, service *corev1.Service) (provider.LoadBalancerOwner, bool, error) {
	service = service.DeepCopy() // the provider's own (see ownCopy)
	r, err := do(ctx, b.layer, call{"LoadBalancerOwner", FamilyLoadBalancers, serviceKey(service)}, func(ctx context.Context) (lbOwner, error) {
		o, ok, err := b.owners.LoadBalancerOwner(ctx, clusterName, service)
		return lbOwner{o, ok}, err
	})
	return r.owner, r.exists, err
}

type loadBalancer struct {
	layer *Layer
	inner cloudprovider.LoadBalancer
}

type lbStatus struct {
	status *corev1.LoadBalancerStatus
	exists bool
}

func (b loadBalancer) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	service = service.DeepCopy() // the provider's own (see ownCopy)
	r, err := do(ctx, b.layer, call{"GetLoadBalancer", FamilyLoadBalancers, serviceKey(service)}, func(ctx context.Context) (lbStatus, error) {
		s, ok, err := b.inner.GetLoadBalancer(ctx, clusterName, service)
		return lbStatus{s, ok}, err
	})
	return r.status, r.exists, err
}

// GetLoadBalancerName is not a cloud call: it goes straight to the provider.
func (b loadBalancer) GetLoadBalancerName(ctx context.Context, clusterName string, service *corev1.Service) string {
	return b.inner.GetLoadBalancerName(ctx, clusterName, service)
}

func (b loadBalancer) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	service = service.DeepCopy() // the provider's own (see ownCopy)
	return do(ctx, b.layer, call{"EnsureLoadBalancer", FamilyLoadBalancers, serviceKey(service)}, func(ctx context.Context) (*corev1.LoadBalancerStatus, error) {
		return b.inner.EnsureLoadBalancer(ctx, clusterName, service, nodes)
	})
}

func (b loadBalancer) UpdateLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) error {
	service = service.DeepCopy() // the provider's own (see ownCopy)
	_, err := do(ctx, b.layer, call{"UpdateLoadBalancer", FamilyLoadBalancers, serviceKey(service)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.inner.UpdateLoadBalancer(ctx, clusterName, service, nodes)
	})
	return err
}

func (b loadBalancer) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	service = service.DeepCopy() // the provider's own (see ownCopy)
	_, err := do(ctx, b.layer, call{"EnsureLoadBalancerDeleted", FamilyLoadBalancers, serviceKey(service)}, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.inner.EnsureLoadBalancerDeleted(ctx, clusterName, service)
	})
	return err
}

// serviceKey is the object key of a load balancer call: the Service, by
// namespace/name, which is what the load balancer is named after.
func serviceKey(service *corev1.Service) string {
	return "loadbalancer/" + service.Namespace + "/" + service.Name
}
