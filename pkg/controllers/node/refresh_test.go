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

// A node initialized less than a period ago is not asked about again by the
// refresh; one answered longer ago is, and its record goes.
func TestAnsweredWithinThePeriod(t *testing.T) {
	now := time.Now()
	const period = 10 * time.Second
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
			a := newAnswered()
			if tc.answered > 0 {
				a.record("n", now.Add(-tc.answered))
			}
			if got := a.fresh("n", now, period); got != tc.wantFresh {
				t.Errorf("fresh = %v, want %v", got, tc.wantFresh)
			}
			if !tc.wantFresh && len(a.at) != 0 {
				t.Errorf("a stale record stays: %v", a.at)
			}
		})
	}
	a := newAnswered()
	a.record("old", now.Add(-2*period))
	a.record("new", now)
	a.prune(now, period)
	if _, ok := a.at["old"]; ok || len(a.at) != 1 {
		t.Errorf("after prune: %v, want only the new record", a.at)
	}
}
