package local

import (
	"net/netip"
	"testing"
	"time"
)

// However many clients send, a load balancer keeps at most maxStickyClients
// affinity entries and a UDP listener at most maxUDPFlows flows.
func TestPerClientStateIsBounded(t *testing.T) {
	s, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.healthDisabled = true
	b := &balancer{s: s, prober: newProber(s), sticky: map[netip.Addr]stickyEntry{},
		cfg:      lbConfig{affinity: time.Hour},
		backends: []backend{{node: "a", ip: netip.MustParseAddr("198.18.0.10")}, {node: "b", ip: netip.MustParseAddr("198.18.0.11")}}}
	base := netip.MustParseAddr("198.18.128.0")
	client := base
	for range maxStickyClients + 1000 {
		if _, ok := b.pick(client, nil); !ok {
			t.Fatal("no backend picked")
		}
		client = client.Next()
	}
	if n := len(b.sticky); n > maxStickyClients {
		t.Errorf("%d affinity entries, want at most %d", n, maxStickyClients)
	}
	// The newest client is still sticky: it was given room.
	last := client.Prev()
	first, _ := b.pick(last, nil)
	if again, _ := b.pick(last, nil); again != first {
		t.Errorf("the newest client moved from %v to %v", first, again)
	}

	u := &udpProxy{b: b, key: listenerKey{protocol: "UDP", port: 53}, flows: map[netip.AddrPort]*udpFlow{}}
	for i := range maxUDPFlows {
		u.flows[netip.AddrPortFrom(base, uint16(i+1))] = &udpFlow{}
	}
	if f := u.flow(netip.AddrPortFrom(base, 60000)); f != nil {
		t.Errorf("a new UDP client got a flow beyond the bound of %d", maxUDPFlows)
	}
	if n := len(u.flows); n != maxUDPFlows {
		t.Errorf("%d flows, want %d", n, maxUDPFlows)
	}
}
