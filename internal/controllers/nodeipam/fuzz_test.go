package nodeipam

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// FuzzClusterCIDRs feeds --cluster-cidr and the node masks, as a user types
// them, through parsing, validation and allocation: a malformed value is an
// error naming the flag, never a panic, and what is allocated lies in the
// cluster CIDR, has the node mask, and is never handed out twice.
func FuzzClusterCIDRs(f *testing.F) {
	f.Add("198.18.0.0/16", 24, 64, 5)
	f.Add("198.18.0.0/16,fd00:10:244::/56", 24, 64, 300)
	f.Add("192.0.2.0/30", 31, 64, 3)
	f.Add("::/0", 24, 128, 2)
	f.Add("198.18.0.0/15,198.19.0.0/16", 24, 64, 1)
	f.Add(" 198.18.0.1/33", 24, 64, 1)
	f.Add("fd00::/8", 24, 120, 4)
	f.Fuzz(func(t *testing.T, flag string, maskV4, maskV6, allocations int) {
		cidrs, err := ParseClusterCIDRs(flag)
		if err != nil {
			if !strings.Contains(err.Error(), "--cluster-cidr") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		if err := ValidateRanges(cidrs, maskV4, maskV6); err != nil {
			return
		}
		a, err := newRangeAllocator(cidrs, maskV4, maskV6)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for i := range min(max(allocations, 0), 512) {
			node := fmt.Sprint("node-", i)
			got, err := a.allocate(node)
			if err != nil {
				return // exhausted
			}
			if len(got) != len(cidrs) {
				t.Fatalf("%s got %v for cluster CIDRs %v", node, got, cidrs)
			}
			for j, s := range got {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					t.Fatalf("allocated %q: %v", s, err)
				}
				want := maskV6
				if cidrs[j].Addr().Is4() {
					want = maskV4
				}
				if p.Bits() != want || !cidrs[j].Contains(p.Addr()) || p.Masked() != p {
					t.Fatalf("allocated %s: not a /%d inside %s", p, want, cidrs[j])
				}
				if seen[s] {
					t.Fatalf("%s allocated twice", s)
				}
				seen[s] = true
			}
			if i%3 == 0 { // released and reused: still no duplicates among the held
				a.release(node)
				for _, s := range got {
					delete(seen, s)
				}
			}
		}
	})
}
