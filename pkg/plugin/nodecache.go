package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

// NODE_CACHE: a load balancer call names its backends (name and
// resourceVersion) and carries in full only the Nodes the plugin does not
// hold yet. Without it every call carries every backend: at 50,000 kubelet
// Nodes that is 136 MB of JSON to encode, send and decode per call, and
// 10,000 load balancers never converge through the boundary.

// ReasonNodeCacheMiss is the outrigger-reason of a call whose node_refs
// the plugin could not resolve (FAILED_PRECONDITION with a NodeCacheMiss
// detail); the client sends those Nodes in full and retries once.
const ReasonNodeCacheMiss = "NodeCacheMiss"

// MetadataNodeCache is the trailer a NODE_CACHE plugin sets, to
// NodeCacheKept, once it keeps the Nodes a call carried in full: whatever
// the call's outcome then (a provider error, a throttle), they need not be
// sent again.
const (
	MetadataNodeCache = "outrigger-node-cache"
	NodeCacheKept     = "kept"
)

const (
	// nodeCacheSessions bounds the sessions a plugin keeps: one per
	// Outrigger process that talks to it (a leader, and for a while the one
	// it replaced); the least recently used goes first.
	nodeCacheSessions = 8
	// serverNodeTTL drops the Nodes no call has named for that long (nodes
	// that left the cluster); clientNodeTTL, shorter, makes the client send
	// such a Node in full again before the plugin could have dropped it.
	serverNodeTTL = time.Hour
	clientNodeTTL = 30 * time.Minute
	// sweepEvery is how often either side looks for what expired.
	sweepEvery = time.Minute
	// missNamesMax bounds the names a NodeCacheMiss detail carries; past
	// it the detail names none, which tells the client to forget them all
	// (a plugin that restarted knows none).
	missNamesMax = 1000
	// nodeSetsKept bounds the backend sets a session keeps by digest (most
	// load balancers share one: every ready node), and on the client the
	// digests it knows the plugin holds.
	nodeSetsKept = 16
	// waitWorthy is how many Nodes another call must be sending for a call
	// with nothing of its own to send to wait for it rather than send them
	// again: when Outrigger starts, every worker needs every Node, and one
	// call carrying them is enough.
	waitWorthy = 64
)

// serverNodeCache is a plugin's side: per session, each Node by name, in
// the last two versions it was sent (a call may still name the previous
// version while another has sent the next).
type serverNodeCache struct {
	mu        sync.Mutex
	sessions  map[string]*nodeSession
	now       func() time.Time
	lastSweep time.Time
}

type nodeSession struct {
	nodes map[string]*cachedNode
	sets  map[string]*nodeSet
	used  time.Time
}

// nodeSet is a call's resolved backends, kept under their digest.
type nodeSet struct {
	nodes []*corev1.Node
	used  time.Time
}

type cachedNode struct {
	versions [2]*corev1.Node // newest first
	used     time.Time
}

func newServerNodeCache(now func() time.Time) *serverNodeCache {
	return &serverNodeCache{sessions: map[string]*nodeSession{}, now: now}
}

// session returns id's session, made if new; c.mu is held.
func (c *serverNodeCache) session(id string, now time.Time) *nodeSession {
	s := c.sessions[id]
	if s == nil {
		if len(c.sessions) >= nodeCacheSessions {
			delete(c.sessions, leastRecent(c.sessions, func(o *nodeSession) time.Time { return o.used }))
		}
		s = &nodeSession{nodes: map[string]*cachedNode{}, sets: map[string]*nodeSet{}}
		c.sessions[id] = s
	}
	s.used = now
	return s
}

// store keeps nodes in session id.
func (c *serverNodeCache) store(id string, nodes []*corev1.Node) {
	if len(nodes) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	s := c.session(id, now)
	for _, n := range nodes {
		e := s.nodes[n.Name]
		switch {
		case e == nil:
			s.nodes[n.Name] = &cachedNode{versions: [2]*corev1.Node{n}, used: now}
			continue
		case e.versions[0].ResourceVersion != n.ResourceVersion:
			e.versions[1] = e.versions[0]
		}
		e.versions[0], e.used = n, now
	}
}

// resolve returns the Node of each ref, in order, or the names of those it
// does not hold at that version.
func (c *serverNodeCache) resolve(id string, refs []*pluginpb.NodeRef) ([]*corev1.Node, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sweep(now)
	s := c.session(id, now)
	nodes := make([]*corev1.Node, 0, len(refs))
	var missing []string
	for _, r := range refs {
		var found *corev1.Node
		if e := s.nodes[r.GetName()]; e != nil {
			for _, v := range e.versions {
				if v != nil && v.ResourceVersion == r.GetResourceVersion() {
					found, e.used = v, now
					break
				}
			}
		}
		if found == nil {
			missing = append(missing, r.GetName())
			continue
		}
		nodes = append(nodes, found)
	}
	return nodes, missing
}

// keepSet keeps resolved backends under their digest.
func (c *serverNodeCache) keepSet(id, digest string, nodes []*corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	s := c.session(id, now)
	if _, ok := s.sets[digest]; !ok && len(s.sets) >= nodeSetsKept {
		delete(s.sets, leastRecent(s.sets, func(o *nodeSet) time.Time { return o.used }))
	}
	s.sets[digest] = &nodeSet{nodes: nodes, used: now}
}

// set returns the backends kept under digest, if any.
func (c *serverNodeCache) set(id, digest string) ([]*corev1.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sweep(now)
	set := c.session(id, now).sets[digest]
	if set == nil {
		return nil, false
	}
	set.used = now
	return set.nodes, true
}

// digest is the node_set of refs (see the protocol).
func digest(refs []*pluginpb.NodeRef) string {
	h := sha256.New()
	for _, r := range refs {
		writeRef(h, r.GetName(), r.GetResourceVersion())
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeRef(h interface{ Write([]byte) (int, error) }, name, rv string) {
	_, _ = h.Write([]byte(name))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(rv))
	_, _ = h.Write([]byte{0})
}

// sweep drops what expired, at most once per sweepEvery; c.mu is held.
func (c *serverNodeCache) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < sweepEvery {
		return
	}
	c.lastSweep = now
	for id, s := range c.sessions {
		if now.Sub(s.used) > serverNodeTTL {
			delete(c.sessions, id)
			continue
		}
		// A Node of a set in use is in use: calls named by the set name
		// none of its Nodes one by one.
		inSets := map[string]bool{}
		for d, set := range s.sets {
			if now.Sub(set.used) > serverNodeTTL {
				delete(s.sets, d)
				continue
			}
			for _, n := range set.nodes {
				inSets[n.Name] = true
			}
		}
		for name, e := range s.nodes {
			if now.Sub(e.used) > serverNodeTTL && !inSets[name] {
				delete(s.nodes, name)
			}
		}
	}
}

// size is how many Nodes (versions included) the cache holds.
func (c *serverNodeCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.sessions {
		for _, e := range s.nodes {
			n++
			if e.versions[1] != nil {
				n++
			}
		}
	}
	return n
}

// missError is the FAILED_PRECONDITION a call gets for refs not held.
func missError(missing []string) error {
	detail := &pluginpb.NodeCacheMiss{}
	if len(missing) <= missNamesMax {
		detail.Names = missing
	}
	return missStatus(fmt.Sprintf("%d backend nodes named by reference are not in this plugin's node cache (%s); send them in full", len(missing), ReasonNodeCacheMiss), detail)
}

// setMissError is the FAILED_PRECONDITION a call gets for a node_set not held.
func setMissError(digest string) error {
	return missStatus(fmt.Sprintf("the backend set %s is not in this plugin's node cache (%s); send the node refs", digest, ReasonNodeCacheMiss), &pluginpb.NodeCacheMiss{NodeSet: true})
}

func missStatus(msg string, detail *pluginpb.NodeCacheMiss) error {
	st, err := status.New(codes.FailedPrecondition, msg).WithDetails(detail)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.Err()
}

// cacheMiss reads a plugin's NodeCacheMiss, nil when err is none.
func cacheMiss(err error) *pluginpb.NodeCacheMiss {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		if m, isMiss := d.(*pluginpb.NodeCacheMiss); isMiss {
			return m
		}
	}
	return nil
}

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
func leastRecent[V any](m map[string]V, used func(V) time.Time) string {
	oldest, first := "", true
	var at time.Time
	for k, v := range m {
		if t := used(v); first || t.Before(at) {
			oldest, at, first = k, t, false
		}
	}
	return oldest
}
