package simcloud

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Provider data: what an API served over the cloud in a provider's own
// terms (package awsemu's Elastic Load Balancing) keeps on a load balancer
// beside its generic spec: an ELB's DNS name, subnets, security groups,
// health check, its listeners' HTTP or SSL protocols. The load balancer
// stays one object: the cloud's API lists it, changes its spec and deletes
// it (the data with it) as any other, and never shows the data, which is
// opaque here and belongs to the API that attached it. A load balancer made
// through the cloud's own API has none.

// ErrLBExists is returned by CreateLoadBalancerWithData for a name in use.
var ErrLBExists = errors.New("load balancer exists")

// CreateLoadBalancerWithData creates the load balancer name with spec and
// data attached, as PutLoadBalancer does (a VIP from the pool, the quota),
// but only when the name is free: a caller with its own duplicate rules
// decides about an existing one itself.
func (c *Cloud) CreateLoadBalancerWithData(name string, spec LoadBalancerSpec, data any) (LoadBalancer, error) {
	if name == "" {
		return LoadBalancer{}, fmt.Errorf("%w: a name is required", ErrInvalidLBSpec)
	}
	if err := validateSpec(spec); err != nil {
		return LoadBalancer{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lbs[name]; ok {
		return LoadBalancer{}, fmt.Errorf("%w: %s", ErrLBExists, name)
	}
	lb, err := c.putLoadBalancer(name, spec, nil)
	if err != nil {
		return LoadBalancer{}, err
	}
	c.lbData[name] = data
	return lb, nil
}

// LoadBalancerWithData returns a load balancer by name and the data attached
// to it (nil for none).
func (c *Cloud) LoadBalancerWithData(name string) (LoadBalancer, any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return LoadBalancer{}, nil, false
	}
	return *lb, c.lbData[name], true
}

// LoadBalancerAndData is a load balancer with the data attached to it.
type LoadBalancerAndData struct {
	LoadBalancer
	Data any
}

// LoadBalancersWithData lists the load balancers that carry data, sorted by
// name.
func (c *Cloud) LoadBalancersWithData() []LoadBalancerAndData {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []LoadBalancerAndData
	for _, name := range slices.Sorted(maps.Keys(c.lbData)) {
		if d := c.lbData[name]; d != nil {
			out = append(out, LoadBalancerAndData{LoadBalancer: *c.lbs[name], Data: d})
		}
	}
	return out
}

// ChangeLoadBalancer replaces the spec and data of the load balancer name
// with what change makes of them, in one step: change gets a copy of the
// spec to edit and the data, and returns the new data; an error from change
// leaves the load balancer as it was. The new spec is validated as a PUT's
// (ErrInvalidLBSpec); a missing load balancer is ErrLBNotFound. change runs
// under the cloud's lock: it must not call the cloud.
func (c *Cloud) ChangeLoadBalancer(name string, change func(spec *LoadBalancerSpec, data any) (any, error)) (LoadBalancer, any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.lbs[name]
	if !ok {
		return LoadBalancer{}, nil, fmt.Errorf("%w: %s", ErrLBNotFound, name)
	}
	// A copy, so that a failed change leaves nothing behind and what
	// earlier readers were given is never edited under them.
	spec := lb.LoadBalancerSpec
	spec.Tags = maps.Clone(spec.Tags)
	spec.Listeners = slices.Clone(spec.Listeners)
	spec.Backends = slices.Clone(spec.Backends)
	spec.SourceRanges = slices.Clone(spec.SourceRanges)
	data, err := change(&spec, c.lbData[name])
	if err != nil {
		return LoadBalancer{}, nil, err
	}
	if err := validateSpec(spec); err != nil {
		return LoadBalancer{}, nil, err
	}
	lb.LoadBalancerSpec = spec
	c.lbData[name] = data
	return *lb, data, nil
}
