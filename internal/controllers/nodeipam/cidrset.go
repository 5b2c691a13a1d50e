package nodeipam

import (
	"errors"
	"fmt"
	"math/big"
	"net/netip"
)

// maxSubnetBits bounds how many node subnets one cluster CIDR is cut into
// (2^16), so the set's bitmap stays small; upstream's range allocator has the
// same bound.
const maxSubnetBits = 16

// ErrExhausted is returned when every subnet of a cluster CIDR is in use.
var ErrExhausted = errors.New("no node CIDR left in the cluster CIDR")

// cidrSet hands out the node-sized subnets of one cluster CIDR.
type cidrSet struct {
	cluster  netip.Prefix
	nodeBits int
	used     []bool
	free     int
	next     int // where the next search starts: allocations go round-robin
}

func newCIDRSet(cluster netip.Prefix, nodeMask int) (*cidrSet, error) {
	cluster = cluster.Masked()
	if nodeMask < cluster.Bits() || nodeMask > cluster.Addr().BitLen() {
		return nil, fmt.Errorf("node CIDR mask /%d must be between the cluster CIDR's /%d and /%d", nodeMask, cluster.Bits(), cluster.Addr().BitLen())
	}
	if nodeMask-cluster.Bits() > maxSubnetBits {
		return nil, fmt.Errorf("cluster CIDR %s cut into /%d node CIDRs makes 2^%d of them; at most 2^%d are supported: use a larger node mask or a smaller cluster CIDR", cluster, nodeMask, nodeMask-cluster.Bits(), maxSubnetBits)
	}
	n := 1 << (nodeMask - cluster.Bits())
	return &cidrSet{cluster: cluster, nodeBits: nodeMask, used: make([]bool, n), free: n}, nil
}

func (s *cidrSet) subnet(i int) netip.Prefix {
	base := new(big.Int).SetBytes(s.cluster.Addr().AsSlice())
	off := new(big.Int).Lsh(big.NewInt(int64(i)), uint(s.cluster.Addr().BitLen()-s.nodeBits))
	b := base.Add(base, off).Bytes()
	buf := make([]byte, s.cluster.Addr().BitLen()/8)
	copy(buf[len(buf)-len(b):], b)
	addr, _ := netip.AddrFromSlice(buf)
	return netip.PrefixFrom(addr, s.nodeBits)
}

// index returns the subnet's position, or false when p is not one of the set's
// subnets (another family, outside the cluster CIDR, another size).
func (s *cidrSet) index(p netip.Prefix) (int, bool) {
	if p.Bits() != s.nodeBits || p.Addr().BitLen() != s.cluster.Addr().BitLen() || !s.cluster.Contains(p.Addr()) || p.Masked() != p {
		return 0, false
	}
	base := new(big.Int).SetBytes(s.cluster.Addr().AsSlice())
	a := new(big.Int).SetBytes(p.Addr().AsSlice())
	i := new(big.Int).Rsh(a.Sub(a, base), uint(s.cluster.Addr().BitLen()-s.nodeBits))
	return int(i.Int64()), true
}

func (s *cidrSet) allocate() (netip.Prefix, error) {
	if s.free == 0 {
		return netip.Prefix{}, fmt.Errorf("%w %s (%d /%d node CIDRs, all in use)", ErrExhausted, s.cluster, len(s.used), s.nodeBits)
	}
	for k := range s.used {
		i := (s.next + k) % len(s.used)
		if !s.used[i] {
			s.used[i] = true
			s.free--
			s.next = (i + 1) % len(s.used)
			return s.subnet(i), nil
		}
	}
	panic("cidrSet: free count out of step with the bitmap")
}

// occupy marks p used; it reports false when p is not one of the set's
// subnets. Occupying a used subnet is a no-op.
func (s *cidrSet) occupy(p netip.Prefix) bool {
	i, ok := s.index(p)
	if !ok {
		return false
	}
	if !s.used[i] {
		s.used[i] = true
		s.free--
	}
	return true
}

func (s *cidrSet) release(p netip.Prefix) {
	if i, ok := s.index(p); ok && s.used[i] {
		s.used[i] = false
		s.free++
	}
}
