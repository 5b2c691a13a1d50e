package console

import (
	"slices"
	"strconv"
	"testing"
)

func TestClusterRanges(t *testing.T) {
	cases := []struct {
		cidr    string
		want    []string
		wantErr bool
	}{
		{cidr: "198.18.0.0/16,fd00:10:244::/56", want: []string{"pods-ipv4 198.18.0.0/16 /24", "pods-ipv6 fd00:10:244::/56 /64"}},
		{cidr: "198.18.0.0/16", want: []string{"pods-ipv4 198.18.0.0/16 /24"}},
		{cidr: "198.18.0.0/25", wantErr: true},
		{cidr: "nonsense", wantErr: true},
	}
	for _, tc := range cases {
		got, err := ClusterRanges(tc.cidr, 24, 64)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v", tc.cidr, err)
			continue
		}
		var s []string
		for _, r := range got {
			s = append(s, r.Name+" "+r.Prefix.String()+" /"+strconv.Itoa(r.NodeMask))
		}
		if !tc.wantErr && !slices.Equal(s, tc.want) {
			t.Errorf("%s: %v, want %v", tc.cidr, s, tc.want)
		}
	}
}
