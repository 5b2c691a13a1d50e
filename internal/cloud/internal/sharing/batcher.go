package sharing

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Batcher gathers the single-node lookups that callers make at about the
// same time (the node controller's workers, each initializing one node)
// into one batch call, so initializing a thousand nodes costs a few cloud
// calls rather than a thousand. A lookup waits at most window for company.
type Batcher struct {
	// batch answers up to provider.MaxBatch nodes, in order.
	batch  func(context.Context, []*corev1.Node) []provider.InstanceStatus
	window time.Duration

	mu      sync.Mutex
	pending []*pendingLookup
	timer   *time.Timer
}

type pendingLookup struct {
	ctx  context.Context
	node *corev1.Node
	done chan provider.InstanceStatus
}

// NewBatcher gathers lookups for batch, waiting at most window for company.
func NewBatcher(batch func(context.Context, []*corev1.Node) []provider.InstanceStatus, window time.Duration) *Batcher {
	return &Batcher{batch: batch, window: window}
}

// Lookup answers for node from the next batch call; the caller's
// cancellation ends its wait, never the batch.
func (b *Batcher) Lookup(ctx context.Context, node *corev1.Node) provider.InstanceStatus {
	p := &pendingLookup{ctx: ctx, node: node, done: make(chan provider.InstanceStatus, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	switch {
	case len(b.pending) >= provider.MaxBatch:
		batch := b.take()
		b.mu.Unlock()
		go b.flush(batch)
	case len(b.pending) == 1:
		b.timer = time.AfterFunc(b.window, func() {
			b.mu.Lock()
			batch := b.take()
			b.mu.Unlock()
			b.flush(batch)
		})
		b.mu.Unlock()
	default:
		b.mu.Unlock()
	}
	select {
	case st := <-p.done:
		return st
	case <-ctx.Done():
		return provider.InstanceStatus{Exists: true, Err: ctx.Err()}
	}
}

// take empties the pending list; b.mu must be held.
func (b *Batcher) take() []*pendingLookup {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	batch := b.pending
	b.pending = nil
	return batch
}

func (b *Batcher) flush(batch []*pendingLookup) {
	if len(batch) == 0 {
		return
	}
	nodes := make([]*corev1.Node, len(batch))
	for i, p := range batch {
		nodes[i] = p.node
	}
	// The batch serves several callers, so no single caller's cancellation
	// may cut it short; the cloud-call layer's timeout bounds it.
	ctx := context.WithoutCancel(batch[0].ctx)
	for i, st := range b.batch(ctx, nodes) {
		batch[i].done <- st
	}
}
