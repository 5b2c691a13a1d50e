package nodeipam

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
)

// rangeAllocator hands out one node CIDR per cluster CIDR (one IPv4 and/or
// one IPv6) and remembers which node holds which, so a deleted node's CIDRs
// are released even though the node object is gone.
type rangeAllocator struct {
	mu     sync.Mutex
	sets   []*cidrSet // in --cluster-cidr order; podCIDRs follow it
	byNode map[string][]netip.Prefix
}

// ParseClusterCIDRs reads --cluster-cidr: one CIDR, or an IPv4 and an IPv6
// one separated by a comma.
func ParseClusterCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr %q: %w", s, err)
		}
		out = append(out, p.Masked())
	}
	switch {
	case len(out) > 2:
		return nil, fmt.Errorf("--cluster-cidr %q: at most two CIDRs, one IPv4 and one IPv6", s)
	case len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4():
		return nil, fmt.Errorf("--cluster-cidr %q: two CIDRs must be one IPv4 and one IPv6", s)
	}
	return out, nil
}

func newRangeAllocator(clusterCIDRs []netip.Prefix, maskV4, maskV6 int) (*rangeAllocator, error) {
	a := &rangeAllocator{byNode: map[string][]netip.Prefix{}}
	for _, c := range clusterCIDRs {
		mask := maskV6
		if c.Addr().Is4() {
			mask = maskV4
		}
		s, err := newCIDRSet(c, mask)
		if err != nil {
			return nil, err
		}
		a.sets = append(a.sets, s)
	}
	return a, nil
}

// occupy records CIDRs a node already has (after a restart or a leader
// change). CIDRs outside the cluster CIDRs are ignored: they are not ours.
func (a *rangeAllocator) occupy(node string, cidrs []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		for _, s := range a.sets {
			if s.occupy(p) {
				a.byNode[node] = append(a.byNode[node], p)
			}
		}
	}
}

// allocate reserves one CIDR per cluster CIDR for node. Nothing is reserved
// when any family is exhausted.
func (a *rangeAllocator) allocate(node string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if held := a.byNode[node]; len(held) > 0 {
		return prefixStrings(held), nil
	}
	var got []netip.Prefix
	for _, s := range a.sets {
		p, err := s.allocate()
		if err != nil {
			for i, q := range got {
				a.sets[i].release(q)
			}
			return nil, err
		}
		got = append(got, p)
	}
	a.byNode[node] = got
	return prefixStrings(got), nil
}

// release frees whatever node holds.
func (a *rangeAllocator) release(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.byNode[node] {
		for _, s := range a.sets {
			s.release(p)
		}
	}
	delete(a.byNode, node)
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// ValidateRanges checks that the cluster CIDRs can be cut into node CIDRs of
// the given sizes, so a bad flag fails before anything starts.
func ValidateRanges(clusterCIDRs []netip.Prefix, maskV4, maskV6 int) error {
	_, err := newRangeAllocator(clusterCIDRs, maskV4, maskV6)
	return err
}
