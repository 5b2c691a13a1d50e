package service

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/platform"
	corev1 "k8s.io/api/core/v1"
)

// ToBeDeletedTaint is the taint Cluster Autoscaler puts on a node it is
// about to remove.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// IsBackend reports whether node may serve load balancer traffic, as
// upstream's stable node set: every node except one being deleted, labelled
// node.kubernetes.io/exclude-from-external-load-balancers (read as a
// boolean, so "false" keeps the node and an unparsable value excludes it)
// or tainted for removal by Cluster Autoscaler. Readiness and a missing
// providerID do not count (KEP-3458): kube-proxy health checks take a node
// out of rotation far faster than rewriting every load balancer would.
func IsBackend(node *corev1.Node) bool {
	return node.DeletionTimestamp.IsZero() && included(node) && !toBeDeleted(node)
}

// included is the exclude-from-external-load-balancers label alone.
func included(node *corev1.Node) bool {
	v, ok := node.Labels[corev1.LabelNodeExcludeBalancers]
	if !ok {
		return true
	}
	exclude, err := strconv.ParseBool(v)
	return err == nil && !exclude
}

func toBeDeleted(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == ToBeDeletedTaint })
}

// shouldSyncUpdatedNode reports whether an update of a node starts a sync
// of every load balancer's backends. As upstream, only the exclusion label
// and the providerID do. The autoscaler taint and a deletion timestamp do
// not: the node leaves the backends at the next sync for another reason (or
// when it is deleted), which gives its connections time to drain instead of
// cutting them the moment the autoscaler picks it.
func shouldSyncUpdatedNode(old, cur *corev1.Node) bool {
	return included(old) != included(cur) || old.Spec.ProviderID != cur.Spec.ProviderID
}

// backendsStale reports whether an update of a node changes the backend
// list a later sync must see, whether or not it starts one.
func backendsStale(old, cur *corev1.Node) bool {
	return IsBackend(old) != IsBackend(cur) || old.Spec.ProviderID != cur.Spec.ProviderID
}

// backendSet identifies a backend set as upstream compares them: node
// names and providerIDs (an address change alone does not update load
// balancers). It is a digest, not the list: every Service remembers the set
// it was last synced with, and at 50,000 nodes the list is megabytes.
type backendSet [sha256.Size]byte

func fingerprint(nodes []*corev1.Node) backendSet {
	h := sha256.New()
	var buf []byte
	for _, n := range nodes {
		// Lengths first, so that no two lists of names run together alike.
		buf = binary.AppendUvarint(buf[:0], uint64(len(n.Name)))
		buf = append(buf, n.Name...)
		buf = binary.AppendUvarint(buf, uint64(len(n.Spec.ProviderID)))
		buf = append(buf, n.Spec.ProviderID...)
		h.Write(buf)
	}
	var out backendSet
	h.Sum(out[:0])
	return out
}

// backendList is the backend nodes, listed once per node change rather than
// once per Service. It holds pointers into the cache (cachednodes), not a
// list's copies: at 50,000 nodes a copied list is about 45 MB, made again at
// every node change and kept until the next.
type backendList struct {
	list      cachednodes.Lister
	platforms platform.Set

	// gen counts node changes; the list is stale while at != gen.
	gen   atomic.Uint64
	mu    sync.Mutex
	at    uint64
	nodes []*corev1.Node
	fp    backendSet
}

func newBackendList(list cachednodes.Lister, platforms platform.Set) *backendList {
	b := &backendList{list: list, platforms: platforms}
	b.gen.Store(1)
	return b
}

// invalidate makes the next get list the nodes again.
func (b *backendList) invalidate() { b.gen.Add(1) }

// get returns the backend nodes, sorted by name, and their fingerprint.
// The slice is shared: callers and providers must not modify it.
func (b *backendList) get(ctx context.Context) ([]*corev1.Node, backendSet, error) {
	gen := b.gen.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.at == gen {
		return b.nodes, b.fp, nil
	}
	all, err := b.list(ctx)
	if err != nil {
		return nil, backendSet{}, err
	}
	nodes := make([]*corev1.Node, 0, len(all))
	for _, n := range all {
		if IsBackend(n) && b.platforms.Owns(n) {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	b.nodes, b.fp, b.at = nodes, fingerprint(nodes), gen
	return b.nodes, b.fp, nil
}

// maxNodeNamesInEvent bounds the node names an Event lists, as upstream.
const maxNodeNamesInEvent = 20

// nodeNames lists up to maxNodeNamesInEvent names (nodes are sorted by
// name) and says how many more there are.
func nodeNames(nodes []*corev1.Node) []string {
	out := make([]string, 0, min(len(nodes), maxNodeNamesInEvent+1))
	for i, n := range nodes {
		if i == maxNodeNamesInEvent {
			out = append(out, fmt.Sprintf("<%d more>", len(nodes)-i))
			break
		}
		out = append(out, n.Name)
	}
	return out
}
