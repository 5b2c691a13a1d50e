package route

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// action is what a pass does with one node pod CIDR, as upstream decides it.
type action int

const (
	keep   action = iota // the route exists (a blackhole is deleted all the same)
	add                  // no route: create one
	update               // the route's node addresses are stale: delete and create
)

// plan is what a pass does.
type plan struct {
	// actions has an entry for every node with pod CIDRs (one per CIDR)
	// and an empty one for every node a route targets but that has none.
	actions map[string]map[string]action
	deletes []*cloudprovider.Route
	creates []*cloudprovider.Route
	// refused are the pod CIDRs outside the cluster CIDRs, and
	// overlapping the pod CIDRs that overlap a service CIDR, by node: no
	// route is made for them.
	refused, overlapping map[string][]string
}

func (r *reconciler) plan(nodes []*corev1.Node, routes []*cloudprovider.Route, serviceCIDRs []netip.Prefix) plan {
	p := plan{actions: map[string]map[string]action{}}
	foreign := map[string]bool{}
	for _, n := range nodes {
		if !r.opts.Platforms.Owns(n) {
			foreign[n.Name] = true
		}
	}
	byNode := map[string][]*cloudprovider.Route{}
	for _, rt := range routes {
		if rt.TargetNode == "" || foreign[string(rt.TargetNode)] {
			continue
		}
		n := string(rt.TargetNode)
		byNode[n] = append(byNode[n], rt)
		if p.actions[n] == nil {
			p.actions[n] = map[string]action{}
		}
	}
	for _, n := range nodes {
		if len(n.Spec.PodCIDRs) == 0 || foreign[n.Name] {
			continue
		}
		if p.actions[n.Name] == nil {
			p.actions[n.Name] = map[string]action{}
		}
		for _, cidr := range n.Spec.PodCIDRs {
			if !r.inside(cidr) {
				if p.refused == nil {
					p.refused = map[string][]string{}
				}
				p.refused[n.Name] = append(p.refused[n.Name], cidr)
				// Not routed: the node's NetworkUnavailable says so.
				p.actions[n.Name][cidr] = add
				continue
			}
			if overlaps(cidr, serviceCIDRs) {
				if p.overlapping == nil {
					p.overlapping = map[string][]string{}
				}
				p.overlapping[n.Name] = append(p.overlapping[n.Name], cidr)
				p.actions[n.Name][cidr] = add
				continue
			}
			a := routeAction(byNode[n.Name], cidr, n.Status.Addresses)
			p.actions[n.Name][cidr] = a
			if a != keep {
				p.creates = append(p.creates, &cloudprovider.Route{
					// The provider gets its own addresses: the node is the cache's.
					TargetNode: types.NodeName(n.Name), TargetNodeAddresses: slices.Clone(n.Status.Addresses), DestinationCIDR: cidr,
				})
			}
		}
	}
	for _, rt := range routes {
		if !r.responsible(rt.DestinationCIDR) || foreign[string(rt.TargetNode)] {
			continue
		}
		a, wanted := p.actions[string(rt.TargetNode)][rt.DestinationCIDR]
		if rt.Blackhole || !wanted || a == update {
			p.deletes = append(p.deletes, rt)
		}
	}
	return p
}

// routeAction: a route to the CIDR is kept unless the provider tracks node
// addresses on routes (EnableNodeAddresses) and the node's changed.
func routeAction(routes []*cloudprovider.Route, cidr string, addrs []corev1.NodeAddress) action {
	for _, rt := range routes {
		if rt.DestinationCIDR != cidr {
			continue
		}
		if !rt.EnableNodeAddresses || sameAddresses(addrs, rt.TargetNodeAddresses) {
			return keep
		}
		return update
	}
	return add
}

// sameAddresses compares regardless of order, as upstream does: a provider
// need not return them in the order they were given.
func sameAddresses(a, b []corev1.NodeAddress) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x corev1.NodeAddress) bool { return !slices.Contains(b, x) })
}

// responsible reports whether a route's destination overlaps a cluster CIDR
// (its first or last address is inside one), upstream's test of ownership.
func (r *reconciler) responsible(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	p = p.Masked()
	first, last := p.Addr(), lastAddr(p)
	for _, c := range r.opts.ClusterCIDRs {
		if c.Contains(first) || c.Contains(last) {
			return true
		}
	}
	return false
}

// inside reports whether a pod CIDR lies wholly inside a cluster CIDR: the
// only destinations a route is made for.
func (r *reconciler) inside(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	p = p.Masked()
	for _, c := range r.opts.ClusterCIDRs {
		if c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// overlaps reports whether cidr shares an address with one of prefixes.
func overlaps(cidr string, prefixes []netip.Prefix) bool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(prefixes, func(s netip.Prefix) bool { return s.Overlaps(p.Masked()) })
}

func prefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ", ")
}
