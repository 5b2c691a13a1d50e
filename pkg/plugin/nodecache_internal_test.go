package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

	// Named only by their set for hours, the set's Nodes stay: a call
	// whose set changed names them one by one again.
	c = newServerNodeCache(clk.now)
	c.store("s", nodes)
	c.keepSet("s", "d", nodes)
	for range 3 {
		clk.t = clk.t.Add(50 * time.Minute)
		if _, ok := c.set("s", "d"); !ok {
			t.Fatal("a set used within the TTL is gone")
		}
	}
	if _, missing := c.resolve("s", refsOf(nodes)); len(missing) > 0 {
		t.Errorf("after 150 minutes of calls by their set, %d of its nodes are gone", len(missing))
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

// Calls share the sending of Nodes: a call planned while enough of its
// Nodes are on their way in another call waits for that call, whether or
// not it has Nodes of its own, and then sends its own and those the other
// did not deliver.
func TestSentNodesCallsShareOneSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	nodes := cacheNodes(waitWorthy, "1")
	own := cacheNodes(waitWorthy+1, "1")[waitWorthy:]
	for _, tt := range []struct {
		name      string
		own       []*corev1.Node
		answered  bool
		wantFills int
	}{
		{"none of its own, the sender answered", nil, true, 0},
		{"none of its own, the sender failed", nil, false, waitWorthy},
		{"one of its own, the sender answered", own, true, 1},
		{"one of its own, the sender failed", own, false, waitWorthy + 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newSentNodes(time.Now)
			a, err := c.plan(ctx, nodes)
			if err != nil || len(a.fill) != len(nodes) {
				t.Fatalf("first plan: %d to send (%v), want %d", len(a.fill), err, len(nodes))
			}
			got := make(chan *backendPlan, 1)
			go func() {
				p, err := c.plan(ctx, append(nodes[:len(nodes):len(nodes)], tt.own...))
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			awaitWait(ctx, t, c, 1, got, "the call did not wait for the one sending its Nodes")
			c.done(a, tt.answered, false)
			if p := <-got; len(p.fill) != tt.wantFills {
				t.Errorf("after the sender ended: %d to send, want %d", len(p.fill), tt.wantFills)
			}
		})
	}
}

// A call whose context ends while it waits leaves its own Nodes to the next
// call, which does not wait for the call that was never sent.
func TestSentNodesWaiterGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	c := newSentNodes(time.Now)
	all := cacheNodes(2*waitWorthy, "1")
	first, own := all[:waitWorthy], all[waitWorthy:]
	a, err := c.plan(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, giveUp := context.WithCancel(ctx)
	got := make(chan *backendPlan, 1)
	go func() {
		p, err := c.plan(waitCtx, all)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the plan whose context ended: %v, want %v", err, context.Canceled)
		}
		got <- p
	}()
	awaitWait(ctx, t, c, 1, got, "the call did not wait for the one sending its Nodes")
	giveUp()
	<-got
	c.done(a, true, false)
	short, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	p, err := c.plan(short, own)
	if err != nil {
		t.Fatalf("the next call with those Nodes: %v (it waited for the call that gave up)", err)
	}
	if len(p.fill) != len(own) {
		t.Errorf("the next call sends %d Nodes, want %d", len(p.fill), len(own))
	}
}

// awaitWait returns once c counted want waits; a plan that ends on got
// before is a call that did not wait (what says which).
func awaitWait(ctx context.Context, t *testing.T, c *sentNodes, want int, got <-chan *backendPlan, what string) {
	t.Helper()
	for {
		c.mu.Lock()
		n := c.waits
		c.mu.Unlock()
		if n >= want {
			return
		}
		select {
		case p := <-got:
			t.Fatalf("%s (by set %v, %d to send)", what, p.bySet, len(p.fill))
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		default:
			runtime.Gosched()
		}
	}
}

// heldSet is a client that sent three Nodes and had the plugin resolve
// their set, with the plan that sent them.
func heldSet(ctx context.Context, now func() time.Time) (*sentNodes, []*corev1.Node, *backendPlan) {
	c := newSentNodes(now)
	nodes := cacheNodes(3, "1")
	p, _ := c.plan(ctx, nodes)
	c.done(p, true, true)
	return c, nodes, p
}

// forget makes the named Nodes (or all) travel in full again.
func TestSentNodesForget(t *testing.T) {
	ctx := context.Background()
	c, nodes, p := heldSet(ctx, time.Now)
	for _, tt := range []struct {
		miss      *pluginpb.NodeCacheMiss
		wantBySet bool
		want      int
	}{
		{&pluginpb.NodeCacheMiss{}, true, 0}, // before: the set is known
		{&pluginpb.NodeCacheMiss{NodeSet: true}, false, 0},
		{&pluginpb.NodeCacheMiss{Names: []string{"n1"}}, false, 1},
		{&pluginpb.NodeCacheMiss{}, false, 3},
	} {
		if tt.miss.GetNodeSet() || len(tt.miss.GetNames()) > 0 || !tt.wantBySet {
			c.forget(p, tt.miss)
		}
		p, _ = c.plan(ctx, nodes)
		if p.bySet != tt.wantBySet || len(p.fill) != tt.want {
			t.Errorf("after %v: by set %v, %d to send; want %v, %d", tt.miss, p.bySet, len(p.fill), tt.wantBySet, tt.want)
		}
		c.done(p, true, true)
	}
}

// The digest both sides compute of the same backends is the same, and
// differs with the order or a version.
func TestNodeSetDigest(t *testing.T) {
	c := newSentNodes(time.Now)
	nodes := cacheNodes(3, "1")
	p, _ := c.plan(context.Background(), nodes)
	if got := digest(refsOf(nodes)); got != p.digest {
		t.Errorf("the plugin's digest %s, the client's %s", got, p.digest)
	}
	swapped := []*corev1.Node{nodes[1], nodes[0], nodes[2]}
	for name, other := range map[string][]*corev1.Node{"order": swapped, "version": append(nodes[:2:2], cacheNodes(3, "2")[2])} {
		if digest(refsOf(other)) == p.digest {
			t.Errorf("another %s, the same digest", name)
		}
	}
}

// The client's digest of a list is the plugin's, also when the list is
// the last one's (memoized) or the same Nodes changed in place.
func TestSentNodesDigestOfTheLastList(t *testing.T) {
	c := newSentNodes(time.Now)
	nodes := cacheNodes(4, "1")
	for _, tt := range []struct {
		name   string
		change func()
	}{
		{"a first list", func() {}},
		{"the same list again", func() {}},
		{"a version changed in place", func() { nodes[2].ResourceVersion = "2" }},
		{"a name changed in place", func() { nodes[0].Name = "m0" }},
		{"a node fewer", func() { nodes = nodes[:3] }},
		{"the list copied", func() { nodes = append([]*corev1.Node(nil), nodes...) }},
	} {
		tt.change()
		if got, want := c.digestOf(nodes), digest(refsOf(nodes)); got != want {
			t.Errorf("%s: the client's digest %s, the plugin's %s", tt.name, got, want)
		}
	}
}

// A set found held goes by its digest without a pass over its Nodes until
// checkAgain, or until something may have made it unusable: a call that was
// not answered sends the refs again.
func TestSentNodesSetCheckedAgain(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, nodes, _ := heldSet(ctx, clk.now)
	for i, tt := range []struct {
		after     time.Duration
		answered  bool
		wantBySet bool
	}{
		{0, true, true},            // a full pass finds the set held
		{time.Second, false, true}, // by digest alone; not answered
		{time.Second, true, false}, // so the refs again, and the plugin resolves them
		{time.Second, true, true},
		{checkAgain, true, true}, // a full pass again
	} {
		clk.t = clk.t.Add(tt.after)
		p, err := c.plan(ctx, nodes)
		if err != nil || p.bySet != tt.wantBySet {
			t.Fatalf("call %d: by set %v (%v), want %v", i, p.bySet, err, tt.wantBySet)
		}
		c.done(p, tt.answered, tt.answered)
	}
	if e := c.nodes["n0"]; e == nil || !e.used.Equal(clk.t) {
		t.Errorf("after the last full pass the Nodes were last used %v, want %v", e, clk.t)
	}
}

// A plugin resolves a set's digest to the backends it kept under it, says
// so when it holds none, and refuses a digest that is not the refs'.
func TestServerNodeSets(t *testing.T) {
	ctx := context.Background()
	s := NewServer(&recorder{}, Info{}).(*server)
	nodes := cacheNodes(2, "1")
	refs, d := refsOf(nodes), digest(refsOf(nodes))
	if _, err := s.backends(ctx, "s", d, 2, refs, nodes); err != nil {
		t.Fatal(err)
	}
	got, err := s.backends(ctx, "s", d, 2, nil, nil)
	if err != nil || len(got) != 2 || got[0] != nodes[0] || got[1] != nodes[1] {
		t.Errorf("by the set's digest: %v (%v), want the two nodes", got, err)
	}
	for name, tt := range map[string]struct {
		set   string
		count int
		refs  []*pluginpb.NodeRef
		want  codes.Code
	}{
		"a set not held":          {"0f", 2, nil, codes.FailedPrecondition},
		"a count not the set's":   {d, 3, nil, codes.FailedPrecondition},
		"a digest not the refs'":  {"0f", 2, refs, codes.InvalidArgument},
		"the set, and its refs":   {d, 2, refs, codes.OK},
		"no backends, by the set": {digest(nil), 0, nil, codes.OK},
	} {
		_, err := s.backends(ctx, "s", tt.set, tt.count, tt.refs, nil)
		if status.Code(err) != tt.want {
			t.Errorf("%s: %v, want %s", name, err, tt.want)
		}
		if m := cacheMiss(err); tt.want == codes.FailedPrecondition && !m.GetNodeSet() {
			t.Errorf("%s: NodeCacheMiss %v, want node_set", name, m)
		}
	}
}

// Calls naming a set the plugin has not resolved wait for the one call
// sending it, then name it by its digest; when that call fails, one of
// them sends the set next and the others wait for it in turn. Each call
// sent by reference would carry a NodeRef per backend.
func TestSentNodesOneCallResolvesASet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	const waiters = 5
	c := newSentNodes(time.Now)
	nodes := cacheNodes(3, "1")
	first, err := c.plan(ctx, nodes)
	if err != nil || first.bySet {
		t.Fatalf("first plan: by set %v (%v)", first.bySet, err)
	}
	got := make(chan *backendPlan, waiters)
	for range waiters {
		go func() {
			p, err := c.plan(ctx, nodes)
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
	}
	// The sender fails: one waiter sends next, the rest wait for it.
	awaitWait(ctx, t, c, waiters, got, "a call did not wait for the one resolving its set")
	c.done(first, false, false)
	next := <-got
	if next.bySet {
		t.Fatal("after the sender failed, the next call names the set by digest")
	}
	awaitWait(ctx, t, c, 2*waiters-1, got, "two calls sent the set at once")
	// It is answered: the others name the set by its digest.
	c.done(next, true, true)
	for range waiters - 1 {
		if p := <-got; !p.bySet || len(p.fill) > 0 {
			t.Errorf("after the set was resolved: by set %v, %d to send", p.bySet, len(p.fill))
		}
	}
}
