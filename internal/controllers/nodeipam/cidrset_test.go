package nodeipam

import (
	"errors"
	"net/netip"
	"testing"
)

func TestCIDRSet(t *testing.T) {
	tests := []struct {
		cluster string
		mask    int
		want    []string // the first allocations, in order
		total   int
		wantErr bool
	}{
		{cluster: "198.18.0.0/16", mask: 24, want: []string{"198.18.0.0/24", "198.18.1.0/24", "198.18.2.0/24"}, total: 256},
		{cluster: "198.18.0.0/30", mask: 31, want: []string{"198.18.0.0/31", "198.18.0.2/31"}, total: 2},
		{cluster: "fd00:10:244::/56", mask: 64, want: []string{"fd00:10:244::/64", "fd00:10:244:1::/64", "fd00:10:244:2::/64"}, total: 256},
		{cluster: "fd00::/48", mask: 64, want: []string{"fd00::/64", "fd00:0:0:1::/64"}, total: 65536},
		{cluster: "198.18.0.0/15", mask: 32, wantErr: true},
		{cluster: "198.18.0.0/16", mask: 8, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.cluster, func(t *testing.T) {
			s, err := newCIDRSet(netip.MustParsePrefix(tc.cluster), tc.mask)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			for i, w := range tc.want {
				got, err := s.allocate()
				if err != nil || got.String() != w {
					t.Fatalf("allocation %d = %s, %v; want %s", i, got, err, w)
				}
			}
			for i := len(tc.want); i < tc.total; i++ {
				if _, err := s.allocate(); err != nil {
					t.Fatalf("allocation %d of %d: %v", i, tc.total, err)
				}
			}
			if _, err := s.allocate(); !errors.Is(err, ErrExhausted) {
				t.Fatalf("allocation past %d: %v, want ErrExhausted", tc.total, err)
			}
			first := netip.MustParsePrefix(tc.want[0])
			s.release(first)
			if got, err := s.allocate(); err != nil || got != first {
				t.Errorf("after release got %s, %v; want %s", got, err, first)
			}
		})
	}
}

func TestOccupyIgnoresForeignCIDRs(t *testing.T) {
	s, _ := newCIDRSet(netip.MustParsePrefix("198.18.0.0/16"), 24)
	for _, p := range []string{"198.19.0.0/24", "198.18.0.0/25", "198.18.0.128/24", "fd00::/64"} {
		if s.occupy(netip.MustParsePrefix(p)) {
			t.Errorf("occupied %s", p)
		}
	}
	if !s.occupy(netip.MustParsePrefix("198.18.0.0/24")) {
		t.Fatal("did not occupy its own subnet")
	}
	if got, _ := s.allocate(); got.String() != "198.18.1.0/24" {
		t.Errorf("allocated %s after occupying 198.18.0.0/24", got)
	}
}

func TestParseClusterCIDRs(t *testing.T) {
	for in, ok := range map[string]bool{
		"198.18.0.0/16":                         true,
		"198.18.0.0/16,fd00:10:244::/56":        true,
		"fd00:10:244::/56, 198.18.0.0/16":       true,
		"198.18.0.0/16,198.19.0.0/16":           false,
		"198.18.0.0/16,fd00::/48,198.19.0.0/16": false,
		"198.18.0.0":                            false,
		"":                                      false,
	} {
		if _, err := ParseClusterCIDRs(in); (err == nil) != ok {
			t.Errorf("ParseClusterCIDRs(%q) = %v", in, err)
		}
	}
}

func TestAllocatorDualStackAllOrNothing(t *testing.T) {
	a, err := newRangeAllocator([]netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("fd00::/127")}, 25, 128)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if got, err := a.allocate(n); err != nil || len(got) != 2 {
			t.Fatalf("allocate(%s) = %v, %v", n, got, err)
		}
	}
	// IPv6 has only two /128s: the third node gets nothing, and its IPv4
	// reservation is given back.
	if _, err := a.allocate("c"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third allocation: %v", err)
	}
	a.release("a")
	got, err := a.allocate("c")
	if err != nil || got[0] != "198.18.0.0/25" || got[1] != "fd00::/128" {
		t.Errorf("after release: %v, %v", got, err)
	}
}
