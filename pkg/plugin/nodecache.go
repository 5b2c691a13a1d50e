package plugin

import (
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
