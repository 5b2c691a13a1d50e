package dev

import (
	"net/netip"
	"slices"
	"testing"
)

// TestSplitPool: each cluster of `outrigger dev --clusters` gets its own,
// non-overlapping part of --lb-pool, and a pool too small is refused.
func TestSplitPool(t *testing.T) {
	for _, tc := range []struct {
		pool string
		n    int
		want []string
	}{
		{"127.0.100.0/24", 2, []string{"127.0.100.0/25", "127.0.100.128/25"}},
		{"127.0.100.0/24", 3, []string{"127.0.100.0/26", "127.0.100.64/26", "127.0.100.128/26"}},
		{"127.0.100.7/24", 1, []string{"127.0.100.0/24"}},
		{"127.0.100.0/30", 8, nil},
	} {
		got, err := splitPool(netip.MustParsePrefix(tc.pool), tc.n)
		if tc.want == nil {
			if err == nil {
				t.Errorf("splitPool(%s, %d) = %v, want an error: too small", tc.pool, tc.n, got)
			}
			continue
		}
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if err != nil || !slices.Equal(s, tc.want) {
			t.Errorf("splitPool(%s, %d) = %v, %v; want %v", tc.pool, tc.n, s, err, tc.want)
		}
	}
}
