package simcloud

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

// SetVIPPool moves VIP allocation to the given range: new load balancers get
// its addresses in order, a requested IP outside it is refused, and a full
// pool says so.
func TestSetVIPPool(t *testing.T) {
	c := New("")
	spec := LoadBalancerSpec{Listeners: []Listener{{Protocol: "TCP", Port: 80, NodePort: 30080}}}
	before, err := c.PutLoadBalancer("before", spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if before.VIP != "198.18.0.1" {
		t.Fatalf("default pool: VIP %s, want 198.18.0.1", before.VIP)
	}

	for _, bad := range []string{"fd00::/64", "198.18.128.0/31", "198.18.128.1/32"} {
		if err := c.SetVIPPool(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("SetVIPPool(%s) = nil, want an error", bad)
		}
	}
	if err := c.SetVIPPool(netip.Prefix{}); err == nil {
		t.Error("SetVIPPool(zero) = nil, want an error")
	}

	if err := c.SetVIPPool(netip.MustParsePrefix("198.18.128.7/30")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 3 {
		lb, err := c.PutLoadBalancer(fmt.Sprintf("lb-%d", i), spec, nil)
		if err != nil {
			t.Fatalf("load balancer %d: %v", i, err)
		}
		got = append(got, lb.VIP)
	}
	if want := []string{"198.18.128.5", "198.18.128.6", "198.18.128.7"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("VIPs %v, want %v (the pool's addresses after its network address)", got, want)
	}
	if _, err := c.PutLoadBalancer("full", spec, nil); !errors.Is(err, ErrIPNotAvailable) {
		t.Errorf("a fourth load balancer in a /30: %v, want ErrIPNotAvailable", err)
	}
	if lb, _ := c.GetLoadBalancer("before"); lb.VIP != before.VIP {
		t.Errorf("a load balancer made before keeps its VIP: %s, want %s", lb.VIP, before.VIP)
	}

	// A requested IP must be in the pool now in force.
	if err := c.DeleteLoadBalancer("lb-0", nil); err != nil {
		t.Fatal(err)
	}
	req := spec
	req.RequestedIP = "198.18.0.9"
	if _, err := c.PutLoadBalancer("outside", req, nil); !errors.Is(err, ErrIPNotAvailable) {
		t.Errorf("requested IP outside the pool: %v, want ErrIPNotAvailable", err)
	}
	req.RequestedIP = "198.18.128.5"
	if lb, err := c.PutLoadBalancer("inside", req, nil); err != nil || lb.VIP != "198.18.128.5" {
		t.Errorf("requested free IP in the pool: %+v, %v", lb, err)
	}
}
