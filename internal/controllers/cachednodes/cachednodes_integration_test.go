//go:build integration

package cachednodes_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The periodic loops rely on the lister handing out the cache's own nodes
// (no copy per pass) that are still current after a change.
func TestFromCacheListsTheCachesOwnNodes(t *testing.T) {
	c, err := cache.New(testenv.Config, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	name := testenv.Name("cached")
	testenv.CreateNode(t, name, nil)
	list := cachednodes.FromCache(c)

	find := func() *corev1.Node {
		nodes, err := list(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.Name == name {
				return n
			}
		}
		return nil
	}
	testenv.Eventually(t, 30*time.Second, "the node in the cache", func() (bool, error) {
		return find() != nil, nil
	})
	first := find()
	if again := find(); again != first {
		t.Fatalf("two lists gave two objects for node %s: the lister copies", name)
	}
	patch := []byte(`{"metadata":{"labels":{"outrigger.test/changed":"yes"}}}`)
	if _, err := testenv.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the changed node in the cache", func() (bool, error) {
		return find().Labels["outrigger.test/changed"] == "yes", nil
	})
	if first.Labels["outrigger.test/changed"] != "" {
		t.Fatal("the object listed before the change was modified in place")
	}
}
