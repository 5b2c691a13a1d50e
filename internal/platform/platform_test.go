package platform

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestOf(t *testing.T) {
	node := func(id string) *corev1.Node { return &corev1.Node{Spec: corev1.NodeSpec{ProviderID: id}} }
	sim, err := Parse([]string{"sim", "kwok"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  Set
		id   string
		want Ownership
	}{
		{Set{}, "", Owned},
		{Set{}, "aws:///i-1", Owned},
		{sim, "sim://i-1", Owned},
		{sim, "kwok://n1", Owned},
		{sim, "aws:///us-east-1a/i-1", NotOwned},
		{sim, "simulated://i-1", NotOwned},
		{sim, "sim", NotOwned},
		{sim, "", Undecided},
	} {
		if got := tc.set.Of(node(tc.id)); got != tc.want {
			t.Errorf("%v.Of(%q) = %v, want %v", tc.set.schemes, tc.id, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		wantErr bool
	}{
		{in: nil},
		{in: []string{"aws", "gce", "k3s+x.y-z"}},
		{in: []string{"AWS"}, wantErr: true},
		{in: []string{"aws://"}, wantErr: true},
		{in: []string{""}, wantErr: true},
		{in: []string{"1cloud"}, wantErr: true},
		{in: []string{"aws", "aws"}, wantErr: true},
	} {
		if _, err := Parse(tc.in); (err != nil) != tc.wantErr {
			t.Errorf("Parse(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
		}
	}
}
