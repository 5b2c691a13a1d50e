package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

type batchFlag bool

func (b batchFlag) SupportsBatch() bool { return bool(b) }
func (batchFlag) Lookup(context.Context, []*corev1.Node, cloud.Need, int) []provider.InstanceStatus {
	return nil
}

// A pass covers every node exactly once, in ranges of one node for a
// provider with only per-node calls (several per tick when ticks would be
// too short), or of one batch call's worth when it answers in batches.
func TestRefreshSpreadCoversEveryNodeOnce(t *testing.T) {
	tests := []struct {
		name       string
		batch      bool
		nodes      int
		period     time.Duration
		wantGroups int
	}{
		{name: "per node", nodes: 10, period: time.Second, wantGroups: 10},
		{name: "per node, several per tick", nodes: 1000, period: time.Second, wantGroups: 40},
		{name: "batches", batch: true, nodes: 1200, period: time.Second, wantGroups: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &refresher{opts: Options{Instances: batchFlag(tc.batch), Workers: 4, RefreshPeriod: tc.period}}
			var mu sync.Mutex
			var ranges [][2]int
			r.spread(context.Background(), tc.nodes, func(lo, hi int) {
				mu.Lock()
				ranges = append(ranges, [2]int{lo, hi})
				mu.Unlock()
			})
			slices.SortFunc(ranges, func(a, b [2]int) int { return a[0] - b[0] })
			next := 0
			for _, rg := range ranges {
				if rg[0] != next || rg[1] <= rg[0] {
					t.Fatalf("ranges %v do not cover 0..%d once", ranges, tc.nodes)
				}
				next = rg[1]
			}
			if next != tc.nodes {
				t.Errorf("ranges end at %d, want %d", next, tc.nodes)
			}
			if len(ranges) != tc.wantGroups {
				t.Errorf("%d groups, want %d", len(ranges), tc.wantGroups)
			}
		})
	}
}
