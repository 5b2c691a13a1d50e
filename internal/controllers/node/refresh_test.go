package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

type batchFlag bool

func (b batchFlag) SupportsBatch() bool { return bool(b) }
func (batchFlag) Lookup(context.Context, []*corev1.Node, cloud.Need) []provider.InstanceStatus {
	return nil
}
func (batchFlag) InstanceMetadata(context.Context, *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, errors.New("not asked")
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
		// 4 s spread over 3 groups: 1.33 s apart.
		{name: "per node", nodes: 3, period: 5 * time.Second, wantGroups: 3},
		// 40 ms apart would be too close: 25 nodes a second.
		{name: "per node, several per tick", nodes: 100, period: 5 * time.Second, wantGroups: 4},
		{name: "batches", batch: true, nodes: 1200, period: 5 * time.Second, wantGroups: 3},
		// 3 batches in 0.8 s would be too close: all in one tick.
		{name: "batches, several per tick", batch: true, nodes: 1200, period: time.Second, wantGroups: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
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

// orderRecorder answers nothing and records the nodes each Lookup asked
// about, in order.
type orderRecorder struct {
	mu    sync.Mutex
	asked []string
}

func (*orderRecorder) SupportsBatch() bool { return false }
func (*orderRecorder) InstanceMetadata(context.Context, *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, errors.New("not asked")
}
func (o *orderRecorder) Lookup(_ context.Context, nodes []*corev1.Node, _ cloud.Need) []provider.InstanceStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]provider.InstanceStatus, len(nodes))
	for i, n := range nodes {
		o.asked = append(o.asked, n.Name)
		out[i] = provider.InstanceStatus{Exists: true, Err: errors.New("not answered")}
	}
	return out
}

// Every pass asks about the nodes in the same order, whatever order the
// cache lists them in: each node is then asked one period after the last
// time, never at the end of one pass and again at the start of the next
// (the second ask would be answered from the first, and the node's next
// real answer would be almost two periods away).
func TestRefreshAsksInTheSameOrderEveryPass(t *testing.T) {
	names := []string{"node-c", "node-a", "node-e", "node-b", "node-d"}
	listed := 0
	list := func(context.Context) ([]*corev1.Node, error) {
		// Each list in another order, as a cache's may be.
		listed++
		out := make([]*corev1.Node, len(names))
		for i := range names {
			n := &corev1.Node{}
			n.Name = names[(i+listed)%len(names)]
			out[i] = n
		}
		return out, nil
	}
	rec := &orderRecorder{}
	r := &refresher{nodes: list, opts: Options{Instances: rec, Workers: 1, RefreshPeriod: 10 * time.Millisecond}}
	var passes [][]string
	for range 3 {
		rec.asked = nil
		r.refresh(context.Background())
		passes = append(passes, rec.asked)
	}
	want := slices.Sorted(slices.Values(names))
	for i, got := range passes {
		if !slices.Equal(got, want) {
			t.Errorf("pass %d asked %v, want %v", i, got, want)
		}
	}
}
