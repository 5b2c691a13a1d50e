// Package sharing keeps one question about one node from costing more than
// one cloud call: answers shared between the controllers that ask within a
// short window, one call shared by callers asking the same at the same
// moment, and single-node lookups gathered into batch calls.
package sharing

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Answers share what the cloud said about a node's instance between the
// controllers that ask (the node controller's initialization and address
// refresh, the lifecycle monitor) for a short window, and share one call
// between callers that ask the same question about the same node at the
// same time: never two calls for one node and question within the window.
//
// Only positive answers are kept (the instance exists, is or is not shut
// down, has this metadata): a "not found" may be a cloud's eventual
// consistency for a node that just registered, and an error says nothing.
// The window is short (the lifecycle monitor period) so that an instance
// that goes away is noticed as soon as the lifecycle controller would
// notice it anyway.
type Answers struct {
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex
	byNode  map[string]*answer
	flights map[flightKey]*flight
	// pruneAt is the size at which a new node's answer next prunes the
	// map: twice what the last prune left. With more fresh answers than a
	// fixed size (a refresh pass over 20,000 nodes keeps thousands within
	// the window), every new node would walk the whole map.
	pruneAt int
	// prunes counts the passes over the map, for tests.
	prunes int
}

// minPruneAt is the smallest map that is pruned.
const minPruneAt = 1024

// answer is what is known of one node's instance, and since when.
type answer struct {
	providerID string
	// Each fact has its own time; zero when not known.
	existsAt, shutdownAt, metadataAt time.Time
	shutdown                         bool
	metadata                         *cloudprovider.InstanceMetadata
}

// Question is what is asked about a node's instance.
type Question int

// The questions.
const (
	Exists Question = iota
	Shutdown
	Metadata
)

type flightKey struct {
	node string
	q    Question
}

type flight struct {
	done chan struct{}
	v    any
	err  error
}

// NewAnswers keeps positive answers for window (nothing when it is not
// positive), by now's clock.
func NewAnswers(window time.Duration, now func() time.Time) *Answers {
	return &Answers{window: window, now: now, byNode: map[string]*answer{}, flights: map[flightKey]*flight{}}
}

// fresh reports whether t is within the window.
func (a *Answers) fresh(t time.Time) bool {
	return !t.IsZero() && a.now().Sub(t) <= a.window
}

// lookup returns the node's answer when it is about the same instance; a.mu
// held.
func (a *Answers) lookup(node *corev1.Node) *answer {
	ans := a.byNode[node.Name]
	if ans == nil || ans.providerID != node.Spec.ProviderID {
		return nil
	}
	return ans
}

// cached answers q from what is known, if fresh; a.mu held.
func (a *Answers) cached(node *corev1.Node, q Question) (any, bool) {
	if a.window <= 0 {
		return nil, false
	}
	ans := a.lookup(node)
	if ans == nil {
		return nil, false
	}
	switch q {
	case Exists:
		// Metadata is only ever given for an instance that exists.
		if a.fresh(ans.existsAt) || a.fresh(ans.metadataAt) || a.fresh(ans.shutdownAt) {
			return true, true
		}
	case Shutdown:
		if a.fresh(ans.shutdownAt) {
			return ans.shutdown, true
		}
	case Metadata:
		if a.fresh(ans.metadataAt) {
			return ans.metadata, true
		}
	}
	return nil, false
}

// record keeps a positive answer; a.mu held.
func (a *Answers) record(node *corev1.Node, q Question, v any) {
	if a.window <= 0 {
		return
	}
	now := a.now()
	ans := a.lookup(node)
	if ans == nil {
		if len(a.byNode) >= max(a.pruneAt, minPruneAt) {
			a.prune(now)
			a.pruneAt = 2 * len(a.byNode)
		}
		ans = &answer{providerID: node.Spec.ProviderID}
		a.byNode[node.Name] = ans
	}
	switch q {
	case Exists:
		ans.existsAt = now
	case Shutdown:
		ans.shutdown, ans.shutdownAt = v.(bool), now
	case Metadata:
		ans.metadata, ans.metadataAt = v.(*cloudprovider.InstanceMetadata), now
	}
}

// RecordStatuses keeps the positive answers of a batch lookup, so a
// per-node question about the same nodes within the window costs nothing.
func (a *Answers) RecordStatuses(nodes []*corev1.Node, statuses []provider.InstanceStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for j, st := range statuses {
		if st.Err != nil || !st.Exists {
			continue
		}
		a.record(nodes[j], Shutdown, st.Shutdown)
		if st.Metadata != nil {
			a.record(nodes[j], Metadata, st.Metadata)
		}
	}
}

// prune drops answers older than the window, so the map is as large as
// the nodes asked about recently. a.mu held.
func (a *Answers) prune(now time.Time) {
	a.prunes++
	for name, ans := range a.byNode {
		if now.Sub(ans.existsAt) > a.window && now.Sub(ans.shutdownAt) > a.window && now.Sub(ans.metadataAt) > a.window {
			delete(a.byNode, name)
		}
	}
}

// Ask answers q about node from a fresh answer, from a call already
// asking it, or by calling fn, and keeps a positive answer.
func Ask[T any](ctx context.Context, a *Answers, node *corev1.Node, q Question, positive func(T, error) bool, fn func() (T, error)) (T, error) {
	key := flightKey{node.Name, q}
	// One look under one lock at both what is known and what is being
	// asked, so a caller cannot miss an answer recorded in between.
	a.mu.Lock()
	if v, ok := a.cached(node, q); ok {
		a.mu.Unlock()
		return v.(T), nil
	}
	if f, ok := a.flights[key]; ok {
		a.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil {
				return f.v.(T), nil
			}
			// The other caller's error may be its own (its context):
			// ask for this one.
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
		return fn()
	}
	f := &flight{done: make(chan struct{})}
	a.flights[key] = f
	a.mu.Unlock()
	v, err := fn()
	f.v, f.err = v, err
	a.mu.Lock()
	if positive(v, err) {
		a.record(node, q, v)
	}
	delete(a.flights, key)
	a.mu.Unlock()
	close(f.done)
	return v, err
}
