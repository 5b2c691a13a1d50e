// The client side of the Node cache: which Nodes each plugin session was
// sent, so a call sends only references to the Nodes the plugin holds and
// calls carrying the same Nodes share one send.

package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

// sentNodes is Outrigger's side: which Node versions this session has
// sent to the plugin, and which calls are sending them now.
type sentNodes struct {
	session string
	mu      sync.Mutex
	nodes   map[string]*sentNode
	// sets are the backend sets' digests the plugin resolved, and when
	// each was last used.
	sets      map[string]time.Time
	now       func() time.Time
	lastSweep time.Time
	// gen counts what may leave a set the plugin resolved unusable by its
	// digest alone: a call not answered, a cache miss, a sweep.
	gen uint64
	// checked is the last set a full pass over its Nodes found the plugin
	// holding: the same digest within checkAgain, with no gen in between,
	// goes by set without that pass.
	checked setCheck
	// resolving are the calls in flight that name a set the plugin has not
	// resolved yet, by its digest: one at a time per set. Every load
	// balancer call of a sync names the same set, and each sent by
	// reference is a NodeRef per backend (about 2 MB at 50,000 Nodes) for
	// the plugin to resolve; the others wait for the first and then name
	// the set by its digest.
	resolving map[string]*sending
	// waits counts plans that waited for other calls: the one resolving
	// their set, or those sending their Nodes (for tests).
	waits int

	// memoMu guards memo, the last backend list's digest.
	memoMu sync.Mutex
	memo   listDigest
}

// checkAgain is how long a set found held goes by its digest without a
// pass over its Nodes, which keeps their last use current (clientNodeTTL).
const checkAgain = 10 * time.Second

type setCheck struct {
	digest string
	at     time.Time
	gen    uint64
}

// listDigest is a backend list's refs and their digest. Every load
// balancer call of one sync names the same list (the controller's, built
// again only when a backend changes): hashing it on each call was most of
// the client's cost per call.
type listDigest struct {
	names, rvs []string
	digest     string
}

// digestOf returns the node_set digest of nodes: the last list's when
// nodes name the same Nodes at the same versions (an unchanged list's
// strings are the same strings, so the comparison is cheap).
func (c *sentNodes) digestOf(nodes []*corev1.Node) string {
	c.memoMu.Lock()
	m := c.memo
	c.memoMu.Unlock()
	if len(m.names) == len(nodes) && m.digest != "" {
		same := true
		for i, n := range nodes {
			if n.Name != m.names[i] || n.ResourceVersion != m.rvs[i] {
				same = false
				break
			}
		}
		if same {
			return m.digest
		}
	}
	h := sha256.New()
	m = listDigest{names: make([]string, len(nodes)), rvs: make([]string, len(nodes))}
	for i, n := range nodes {
		writeRef(h, n.Name, n.ResourceVersion)
		m.names[i], m.rvs[i] = n.Name, n.ResourceVersion
	}
	m.digest = hex.EncodeToString(h.Sum(nil))
	c.memoMu.Lock()
	c.memo = m
	c.memoMu.Unlock()
	return m.digest
}

type sentNode struct {
	rv   string
	by   *sending
	used time.Time
}

// sending is one call that carries Nodes in full: they count as held by
// the plugin once it answered (ok).
type sending struct {
	done chan struct{}
	ok   bool
}

func (s *sending) finished() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func newSentNodes(now func() time.Time) *sentNodes {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return &sentNodes{session: hex.EncodeToString(b), nodes: map[string]*sentNode{}, sets: map[string]time.Time{},
		resolving: map[string]*sending{}, now: now}
}

// backendPlan is one call's backends: every one by reference, and in full
// those the plugin may not hold; or, when the plugin holds all of them as
// a set, the set's digest alone (bySet).
type backendPlan struct {
	session string
	refs    []*pluginpb.NodeRef
	fill    []*corev1.Node
	digest  string
	bySet   bool
	count   int
	call    *sending
}

// plan says what a call with these backends sends: the Nodes the plugin
// may not hold, and the set by reference, or the set's digest alone. When
// other calls are sending enough of its Nodes to be worth it, it waits for
// them and sends only what they did not deliver, with its own: at 50,000
// Nodes the first load balancer calls each differ from the others by a few
// Nodes whose versions moved, and each sending every Node (136 MB) made a
// dozen such calls at once, none within its timeout. A call waits only for
// calls planned before it, which never wait for it, so no two calls wait on
// each other; a call that had few of its Nodes in flight sends those too
// (the other call still vouches for them).
func (c *sentNodes) plan(ctx context.Context, nodes []*corev1.Node) (*backendPlan, error) {
	p := &backendPlan{session: c.session, count: len(nodes), call: &sending{done: make(chan struct{})}}
	p.digest = c.digestOf(nodes)
	defer func() {
		if !p.bySet {
			p.refs = make([]*pluginpb.NodeRef, len(nodes))
			for i, n := range nodes {
				p.refs[i] = &pluginpb.NodeRef{Name: n.Name, ResourceVersion: n.ResourceVersion}
			}
		}
	}()
	c.mu.Lock()
	now := c.now()
	c.sweep(now)
	for {
		if ck := c.checked; ck.digest == p.digest && ck.gen == c.gen && now.Sub(ck.at) < checkAgain {
			if _, known := c.sets[p.digest]; known {
				c.sets[p.digest], p.bySet = now, true
				c.mu.Unlock()
				return p, nil
			}
		}
		other := c.resolving[p.digest]
		if _, known := c.sets[p.digest]; known || other == nil {
			break
		}
		c.waits++
		c.mu.Unlock()
		select {
		case <-other.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		now = c.now()
	}
	var pending []*corev1.Node
	others := map[*sending]bool{}
	for _, n := range nodes {
		e := c.nodes[n.Name]
		switch {
		case e == nil || e.rv != n.ResourceVersion || (e.by.finished() && !e.by.ok):
			c.nodes[n.Name] = &sentNode{rv: n.ResourceVersion, by: p.call, used: now}
			p.fill = append(p.fill, n)
		case !e.by.finished():
			pending = append(pending, n)
			others[e.by] = true
		default:
			e.used = now
		}
	}
	if _, known := c.sets[p.digest]; known && len(p.fill) == 0 && len(pending) == 0 {
		c.sets[p.digest], p.bySet = now, true
		c.checked = setCheck{digest: p.digest, at: now, gen: c.gen}
		c.mu.Unlock()
		return p, nil
	}
	if len(pending) < waitWorthy {
		// Sent by this call too, but still the other's to vouch for.
		p.fill = append(p.fill, pending...)
		c.claim(p)
		c.mu.Unlock()
		return p, nil
	}
	c.waits++
	c.mu.Unlock()
	for o := range others {
		select {
		case <-o.done:
		case <-ctx.Done():
			c.abandon(p)
			return nil, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range pending {
		e := c.nodes[n.Name]
		switch {
		case e != nil && e.rv == n.ResourceVersion && e.by.finished() && e.by.ok:
			continue
		case e == nil || e.rv != n.ResourceVersion || e.by.finished():
			c.nodes[n.Name] = &sentNode{rv: n.ResourceVersion, by: p.call, used: now}
		}
		p.fill = append(p.fill, n)
	}
	c.claim(p)
	return p, nil
}

// claim makes p the call that resolves its set, unless the plugin holds
// the set or another call is resolving it; c.mu is held. Only a plan that
// is sent claims (done ends the claim): one that failed would hold the
// calls waiting for it.
func (c *sentNodes) claim(p *backendPlan) {
	if _, known := c.sets[p.digest]; known {
		return
	}
	// done removes its claim before it closes the call, so a claim here is
	// a call still in flight.
	if c.resolving[p.digest] == nil {
		c.resolving[p.digest] = p.call
	}
}

// done ends a planned call: the Nodes it carried count as held by the
// plugin when it answered, and are sent again by the next call when not;
// resolved says the plugin resolved the plan's refs as its set. The calls
// waiting for this one go on only once that is recorded, so that they
// name the set by its digest.
func (c *sentNodes) done(p *backendPlan, answered, resolved bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(p.call.done)
	p.call.ok = answered
	if c.resolving[p.digest] == p.call {
		delete(c.resolving, p.digest)
	}
	if !answered {
		c.gen++
		delete(c.sets, p.digest)
		for _, n := range p.fill {
			if e := c.nodes[n.Name]; e != nil && e.by == p.call {
				delete(c.nodes, n.Name)
			}
		}
		return
	}
	if !resolved || p.bySet {
		return
	}
	now := c.now()
	if _, ok := c.sets[p.digest]; !ok && len(c.sets) >= nodeSetsKept {
		delete(c.sets, leastRecent(c.sets, func(used time.Time) time.Time { return used }))
	}
	c.sets[p.digest] = now
	// The plugin holds every Node of the set now: the calls waiting for
	// this one go by its digest without a pass of their own. A call that
	// sent some of them and fails later moves gen, which ends this check.
	c.checked = setCheck{digest: p.digest, at: now, gen: c.gen}
}

// abandon ends a plan that was never sent: the Nodes it was to send go to
// the next call, and the calls waiting for them go on.
func (c *sentNodes) abandon(p *backendPlan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range p.fill {
		if e := c.nodes[n.Name]; e != nil && e.by == p.call {
			delete(c.nodes, n.Name)
		}
	}
	close(p.call.done)
}

// forget acts on a NodeCacheMiss: the next calls send the refs of its
// set, or the Nodes it names (none: every Node) in full.
func (c *sentNodes) forget(p *backendPlan, miss *pluginpb.NodeCacheMiss) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.sets, p.digest)
	switch {
	case miss.GetNodeSet():
	case len(miss.GetNames()) == 0:
		clear(c.nodes)
		clear(c.sets)
	default:
		for _, n := range miss.GetNames() {
			delete(c.nodes, n)
		}
	}
}

// sweep drops what no call named for clientNodeTTL; c.mu is held.
func (c *sentNodes) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < sweepEvery {
		return
	}
	c.lastSweep = now
	for name, e := range c.nodes {
		if e.by.finished() && now.Sub(e.used) > clientNodeTTL {
			delete(c.nodes, name)
			c.gen++
		}
	}
}

// leastRecent returns the key of m's entry used longest ago: the one a full
// bounded map gives up. A linear scan is enough at the handful of entries the
// bounds allow.
