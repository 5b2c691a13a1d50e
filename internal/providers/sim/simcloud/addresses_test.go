package simcloud

import (
	"fmt"
	"net/netip"
	"testing"
)

// By default the n-th instance gets the n-th address of 198.19.128.0/17 and
// the n-th /24 of 198.19.0.0/17 as pod CIDR: all in the benchmarking range,
// none of them a VIP the default pool hands out first, and the two ranges
// apart from each other.
func TestDefaultAddresses(t *testing.T) {
	c := New("")
	bench := netip.MustParsePrefix("198.18.0.0/15")
	lb, err := c.PutLoadBalancer("lb", LoadBalancerSpec{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr(lb.VIP)
	for i := 1; i <= 3; i++ {
		in, err := c.Create(CreateRequest{Name: fmt.Sprintf("node-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := in.Addresses[0].Address, fmt.Sprintf("198.19.128.%d", i); got != want {
			t.Errorf("instance %d: InternalIP %s, want %s", i, got, want)
		}
		cidrs, err := c.PodCIDRs(in.ID)
		if err != nil {
			t.Fatal(err)
		}
		pods := netip.MustParsePrefix(cidrs[0])
		if want := fmt.Sprintf("198.19.%d.0/24", i-1); cidrs[0] != want {
			t.Errorf("instance %d: pod CIDR %s, want %s", i, cidrs[0], want)
		}
		ip := netip.MustParseAddr(in.Addresses[0].Address)
		if !bench.Contains(ip) || !bench.Contains(pods.Addr()) || pods.Contains(ip) || pods.Contains(vip) || ip == vip {
			t.Errorf("instance %d: address %s, pod CIDR %s and VIP %s overlap or leave 198.18.0.0/15", i, ip, pods, vip)
		}
	}
}

// The pod address space holds 128 /24s; the next instance is refused.
func TestPodCIDRsExhausted(t *testing.T) {
	c := New("")
	for i := range 128 {
		in, err := c.Create(CreateRequest{Name: fmt.Sprintf("node-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.PodCIDRs(in.ID); err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
	in, err := c.Create(CreateRequest{Name: "one-too-many"})
	if err != nil {
		t.Fatal(err)
	}
	if cidrs, err := c.PodCIDRs(in.ID); err == nil {
		t.Fatalf("129th instance got %v, want the pod address space exhausted", cidrs)
	}
}
