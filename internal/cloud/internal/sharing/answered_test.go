package sharing

import (
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"
)

// A node initialized less than a period ago is not asked about again by the
// refresh; one answered longer ago is, and its record goes.
func TestAnsweredWithinThePeriod(t *testing.T) {
	now := time.Now()
	const period = 10 * time.Second
	md := &cloudprovider.InstanceMetadata{ProviderID: "sim://n"}
	tests := []struct {
		name      string
		answered  time.Duration // before now; 0: never
		wantFresh bool
	}{
		{name: "never answered", wantFresh: false},
		{name: "answered just now", answered: time.Millisecond, wantFresh: true},
		{name: "answered within the period", answered: period - time.Second, wantFresh: true},
		{name: "answered a period ago", answered: period, wantFresh: false},
		{name: "answered long ago", answered: 3 * period, wantFresh: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAnswered()
			if tc.answered > 0 {
				a.Record("n", now.Add(-tc.answered), md)
			}
			got, fresh := a.Fresh("n", now, period)
			if fresh != tc.wantFresh {
				t.Errorf("fresh = %v, want %v", fresh, tc.wantFresh)
			}
			if fresh && got != md {
				t.Errorf("fresh record's metadata = %v, want the one recorded", got)
			}
			if !tc.wantFresh && len(a.at) != 0 {
				t.Errorf("a stale record stays: %v", a.at)
			}
		})
	}
	a := NewAnswered()
	a.Record("old", now.Add(-2*period), md)
	a.Record("new", now, md)
	a.Prune(now, period)
	if _, ok := a.at["old"]; ok || len(a.at) != 1 {
		t.Errorf("after prune: %v, want only the new record", a.at)
	}
}
