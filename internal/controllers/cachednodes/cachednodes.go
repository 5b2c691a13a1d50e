// Package cachednodes lists the nodes in the manager's cache as the
// cache's own objects, as upstream's controllers read them from a lister.
//
// controller-runtime's List, even with client.UnsafeDisableDeepCopy, copies
// every node's struct into the NodeList's Items: about a kilobyte per node,
// 5 MB for 5,000 nodes on every pass of a periodic loop, and kept as long as
// the loop keeps its list. The periodic loops (the address refresh, the
// lifecycle monitor) read nodes and never modify them, so pointers into the
// cache are all they need; a write copies its node first.
package cachednodes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Lister returns every node in the cache. The nodes are shared with the
// cache and with other callers: never modify one, copy it first.
type Lister func(ctx context.Context) ([]*corev1.Node, error)

// indexed is what controller-runtime's informers are underneath
// (client-go's SharedIndexInformer).
type indexed interface {
	GetIndexer() toolscache.Indexer
}

// FromCache lists from the node informer's indexer, without copies. An
// informer that exposes no indexer (a cache other than controller-runtime's
// own) is read through FromReader instead.
func FromCache(c cache.Informers) Lister {
	return func(ctx context.Context) ([]*corev1.Node, error) {
		inf, err := c.GetInformer(ctx, &corev1.Node{})
		if err != nil {
			return nil, fmt.Errorf("getting the node informer: %w", err)
		}
		ix, ok := inf.(indexed)
		if !ok {
			r, isReader := c.(client.Reader)
			if !isReader {
				return nil, fmt.Errorf("the node informer (%T) has no indexer to list", inf)
			}
			return FromReader(r)(ctx)
		}
		nodes, err := corelisters.NewNodeLister(ix.GetIndexer()).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("listing cached nodes: %w", err)
		}
		return nodes, nil
	}
}

// FromReader lists through a client.Reader (a fake client in unit tests):
// the structs are copied into a list, their contents are not.
func FromReader(r client.Reader) Lister {
	return func(ctx context.Context) ([]*corev1.Node, error) {
		var list corev1.NodeList
		if err := r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		nodes := make([]*corev1.Node, len(list.Items))
		for i := range list.Items {
			nodes[i] = &list.Items[i]
		}
		return nodes, nil
	}
}
