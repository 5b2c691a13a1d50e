// Address pools: the pod CIDR ranges and how much of each is used.

package console

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// poolUsage counts what of r is taken: load balancer addresses for a VIP
// range, node pod CIDRs for a cluster CIDR.
func poolUsage(r Range, services []*corev1.Service, nodes []*corev1.Node) Pool {
	p := Pool{Name: r.Name, CIDR: r.Prefix.String()}
	bits := r.Prefix.Addr().BitLen()
	base := r.Prefix.Masked().Addr()
	if r.NodeMask > 0 {
		p.Kind, p.Unit = "podcidr", fmt.Sprintf("/%d", r.NodeMask)
		p.Size = slotCount(r.NodeMask - r.Prefix.Bits())
		for _, n := range nodes {
			for _, c := range n.Spec.PodCIDRs {
				pc, err := netip.ParsePrefix(c)
				if err != nil || !r.Prefix.Contains(pc.Addr()) {
					continue
				}
				p.Taken = append(p.Taken, PoolSlot{Index: offset(base, pc.Addr(), bits-r.NodeMask), Value: c, Owner: "Node/" + n.Name})
			}
		}
	} else {
		p.Kind, p.Unit = "vip", "address"
		p.Size = slotCount(bits - r.Prefix.Bits())
		for _, svc := range services {
			for _, in := range svc.Status.LoadBalancer.Ingress {
				a, err := netip.ParseAddr(in.IP)
				if err != nil || !r.Prefix.Contains(a) {
					continue
				}
				p.Taken = append(p.Taken, PoolSlot{Index: offset(base, a, 0), Value: in.IP, Owner: "Service/" + svc.Namespace + "/" + svc.Name})
			}
		}
	}
	slices.SortFunc(p.Taken, func(a, b PoolSlot) int { return cmp.Compare(a.Index, b.Index) })
	p.Used = len(p.Taken)
	if len(p.Taken) > maxTaken {
		p.Taken = p.Taken[:maxTaken]
	}
	return p
}

func slotCount(bits int) int64 {
	if bits >= 40 {
		return maxPoolSize
	}
	return 1 << bits
}

// offset is (a - base) >> shift; a distance beyond the low 64 bits (a
// wide IPv6 range) is capped, as the pool's size is.
func offset(base, a netip.Addr, shift int) int64 {
	b16, a16 := base.As16(), a.As16()
	if [8]byte(b16[:8]) != [8]byte(a16[:8]) {
		return maxPoolSize
	}
	d := (binary.BigEndian.Uint64(a16[8:]) - binary.BigEndian.Uint64(b16[8:])) >> uint(shift)
	if d > maxPoolSize {
		return maxPoolSize
	}
	return int64(d)
}

// ClusterRanges are the ranges of a --cluster-cidr (one or two CIDRs,
// comma-separated), each cut into node pod CIDRs of the mask for its
// family.
func ClusterRanges(clusterCIDR string, maskV4, maskV6 int) ([]Range, error) {
	var out []Range
	for _, part := range strings.Split(clusterCIDR, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("cluster CIDR %q: %w", part, err)
		}
		r := Range{Name: "pods-ipv4", Prefix: p.Masked(), NodeMask: maskV4}
		if p.Addr().Is6() {
			r.Name, r.NodeMask = "pods-ipv6", maskV6
		}
		if r.NodeMask <= p.Bits() || r.NodeMask > p.Addr().BitLen() {
			return nil, fmt.Errorf("cluster CIDR %s: node mask /%d does not fit", p, r.NodeMask)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseRanges reads "name=cidr[/mask]" lists as the command line gives
// them; see Range.
func ParseRanges(specs []string) ([]Range, error) {
	var out []Range
	for _, s := range specs {
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("range %q: want name=CIDR or name=CIDR@nodeMask", s)
		}
		cidr, mask, hasMask := strings.Cut(rest, "@")
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", s, err)
		}
		r := Range{Name: name, Prefix: p.Masked()}
		if hasMask {
			if _, err := fmt.Sscan(mask, &r.NodeMask); err != nil || r.NodeMask <= p.Bits() || r.NodeMask > p.Addr().BitLen() {
				return nil, fmt.Errorf("range %q: node mask %q must be between /%d and /%d", s, mask, p.Bits()+1, p.Addr().BitLen())
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// servedClass finds the provider serving lb's class and records it in lb.
