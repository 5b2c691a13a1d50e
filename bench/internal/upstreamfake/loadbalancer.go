package upstreamfake

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
)

// balancer is one load balancer: its backend set's key and its address.
type balancer struct {
	backends string
	ip       string
}

// LoadBalancer is offered when the cloud-config asks for load balancers.
func (p *provider) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if !p.loadBalancers {
		return nil, false
	}
	return p, true
}

// BackendKey identifies a set of node names whatever their order: how many,
// and the sum of their 64-bit FNV-1a hashes. The benchmark compares a load
// balancer's key with the key of the nodes it expects.
func BackendKey(names []string) string {
	var k backendKey
	for _, n := range names {
		k.add(n)
	}
	return k.String()
}

type backendKey struct {
	n   int
	sum uint64
}

// add adds a name's FNV-1a hash, computed in place: a load balancer's
// update hashes every node's name, 50,000 of them at the largest size.
func (k *backendKey) add(name string) {
	h := uint64(fnvOffset)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= fnvPrime
	}
	k.n++
	k.sum += h
}

// The 64-bit FNV-1a parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (k backendKey) String() string { return fmt.Sprintf("%d/%016x", k.n, k.sum) }

func nodesKey(nodes []*corev1.Node) string {
	var k backendKey
	for _, n := range nodes {
		k.add(n.Name)
	}
	return k.String()
}

// wait is the cloud's latency, cut short by ctx.
func (p *provider) wait(ctx context.Context) error {
	if p.RequestDelay <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(p.RequestDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call admits a call and waits out its latency.
func (p *provider) call(ctx context.Context, op string) error {
	if err := p.admit(op); err != nil {
		return err
	}
	return p.wait(ctx)
}

func (p *provider) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	if err := p.call(ctx, "GetLoadBalancer"); err != nil {
		return nil, false, err
	}
	name := p.GetLoadBalancerName(ctx, clusterName, service)
	p.mu.Lock()
	lb, ok := p.lbs[name]
	p.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	return status(lb, service), true, nil
}

func (p *provider) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if err := p.call(ctx, "EnsureLoadBalancer"); err != nil {
		return nil, err
	}
	p.hangOn("service/" + service.Name)
	return p.setBackends(p.GetLoadBalancerName(ctx, clusterName, service), service, nodesKey(nodes), true), nil
}

func (p *provider) UpdateLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) error {
	if err := p.call(ctx, "UpdateLoadBalancer"); err != nil {
		return err
	}
	if p.setBackends(p.GetLoadBalancerName(ctx, clusterName, service), service, nodesKey(nodes), false) == nil {
		return fmt.Errorf("load balancer of %s/%s not found", service.Namespace, service.Name)
	}
	return nil
}

func (p *provider) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	if err := p.call(ctx, "EnsureLoadBalancerDeleted"); err != nil {
		return err
	}
	name := p.GetLoadBalancerName(ctx, clusterName, service)
	p.mu.Lock()
	defer p.mu.Unlock()
	if lb, ok := p.lbs[name]; ok {
		p.countBackends(lb.backends, -1)
		delete(p.lbs, name)
	}
	return nil
}

// setBackends records a load balancer's backend set, creating it when
// create is set; nil when it does not exist and create is not set.
func (p *provider) setBackends(name string, service *corev1.Service, key string, create bool) *corev1.LoadBalancerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	lb, ok := p.lbs[name]
	switch {
	case ok:
		p.countBackends(lb.backends, -1)
	case !create:
		return nil
	default:
		// Addresses from 198.18.128.0/17: the upper half of the
		// benchmarking range, apart from the Service range (198.19/16).
		lb.ip = fmt.Sprintf("198.18.%d.%d", 128+p.nextIP/256%128, p.nextIP%256)
		p.nextIP++
	}
	lb.backends = key
	p.lbs[name] = lb
	p.countBackends(key, 1)
	p.backendWrites++
	return status(lb, service)
}

func (p *provider) countBackends(key string, d int64) {
	if p.backends[key] += d; p.backends[key] == 0 {
		delete(p.backends, key)
	}
}

func status(lb balancer, service *corev1.Service) *corev1.LoadBalancerStatus {
	ports := make([]corev1.PortStatus, 0, len(service.Spec.Ports))
	for _, sp := range service.Spec.Ports {
		ports = append(ports, corev1.PortStatus{Port: sp.Port, Protocol: sp.Protocol})
	}
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: lb.ip, Ports: ports}}}
}
