package plugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func cacheNodes(n int, rv string) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), ResourceVersion: rv}}
	}
	return out
}

func refsOf(nodes []*corev1.Node) []*pluginpb.NodeRef {
	out := make([]*pluginpb.NodeRef, len(nodes))
	for i, n := range nodes {
		out[i] = &pluginpb.NodeRef{Name: n.Name, ResourceVersion: n.ResourceVersion}
	}
	return out
}

// What a plugin keeps is bounded: sessions beyond nodeCacheSessions push
// out the least recently used, and Nodes no call names for serverNodeTTL
// go (nodes that left the cluster).
func TestServerNodeCacheIsBounded(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newServerNodeCache(clk.now)
	nodes := cacheNodes(10, "1")
	for i := range nodeCacheSessions + 1 {
		clk.t = clk.t.Add(time.Second)
		c.store(fmt.Sprint(i), nodes)
	}
	if got, want := c.size(), nodeCacheSessions*len(nodes); got != want {
		t.Errorf("%d sessions of %d nodes: the cache holds %d, want %d", nodeCacheSessions+1, len(nodes), got, want)
	}
	if _, missing := c.resolve("0", refsOf(nodes)); len(missing) != len(nodes) {
		t.Errorf("the least recently used session still resolves %d of %d refs", len(nodes)-len(missing), len(nodes))
	}

	// Named every 50 minutes, the first five stay; the rest expire.
	c = newServerNodeCache(clk.now)
	c.store("s", nodes)
	for range 3 {
		clk.t = clk.t.Add(50 * time.Minute)
		if _, missing := c.resolve("s", refsOf(nodes[:5])); len(missing) > 0 {
			t.Fatalf("refs named within the TTL missing: %v", missing)
		}
	}
	if got := c.size(); got != 5 {
		t.Errorf("after 150 minutes the cache holds %d nodes, want the 5 still named", got)
	}
}

// A call may name the version before the one another call just sent.
func TestServerNodeCacheKeepsTwoVersions(t *testing.T) {
	c := newServerNodeCache(time.Now)
	for _, rv := range []string{"1", "2", "3"} {
		c.store("s", cacheNodes(1, rv))
	}
	for rv, want := range map[string]int{"1": 1, "2": 0, "3": 0} {
		if _, missing := c.resolve("s", refsOf(cacheNodes(1, rv))); len(missing) != want {
			t.Errorf("version %s: %d missing, want %d", rv, len(missing), want)
		}
	}
}

// A call with nothing of its own to send waits for the one sending the
// Nodes, then names them; when that one failed, it sends them itself. A
// call with Nodes of its own never waits (no two calls wait on each other).
func TestSentNodesCallsShareOneSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	for _, tt := range []struct {
		name      string
		answered  bool
		wantFills int
	}{
		{"the sender was answered", true, 0},
		{"the sender failed", false, waitWorthy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newSentNodes(time.Now)
			nodes := cacheNodes(waitWorthy, "1")
			a, err := c.plan(ctx, nodes)
			if err != nil || len(a.fill) != len(nodes) {
				t.Fatalf("first plan: %d to send (%v), want %d", len(a.fill), err, len(nodes))
			}
			// Another call with one node of its own sends everything now.
			b, err := c.plan(ctx, append(nodes[:len(nodes):len(nodes)], cacheNodes(waitWorthy+1, "1")[waitWorthy]))
			if err != nil || len(b.fill) != len(nodes)+1 {
				t.Fatalf("a call with a node of its own: %d to send (%v), want %d", len(b.fill), err, len(nodes)+1)
			}
			c.done(b, false)
			// A call with none of its own waits for a.
			got := make(chan *backendPlan)
			go func() {
				p, err := c.plan(ctx, nodes)
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			select {
			case p := <-got:
				t.Fatalf("the call did not wait for the one sending its nodes (%d to send)", len(p.fill))
			case <-time.After(50 * time.Millisecond):
			}
			c.done(a, tt.answered)
			if p := <-got; len(p.fill) != tt.wantFills {
				t.Errorf("after the sender ended: %d to send, want %d", len(p.fill), tt.wantFills)
			}
		})
	}
}

// forget makes the named Nodes (or all) travel in full again.
func TestSentNodesForget(t *testing.T) {
	ctx := context.Background()
	c := newSentNodes(time.Now)
	nodes := cacheNodes(3, "1")
	p, _ := c.plan(ctx, nodes)
	c.done(p, true)
	for _, tt := range []struct {
		names []string
		all   bool
		want  int
	}{{[]string{"n1"}, false, 1}, {nil, true, 3}} {
		c.forget(tt.names, tt.all)
		p, _ := c.plan(ctx, nodes)
		if len(p.fill) != tt.want {
			t.Errorf("forget(%v, all=%v): %d to send, want %d", tt.names, tt.all, len(p.fill), tt.want)
		}
		c.done(p, true)
	}
}
