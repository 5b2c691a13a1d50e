package node

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// Siblings are the node controllers of the providers one Outrigger runs
// side by side, one controller each. They agree on two things a controller
// alone cannot know: whether a node of a scheme it does not serve is a
// sibling's (then it says nothing) or nobody's (then one of them, the
// first, says so once), and whether a node without a providerID is known to
// any of the providers asked by name.
type Siblings struct {
	all       platform.Set
	providers []string

	mu sync.Mutex
	// declined: for each node without a providerID, the providers that
	// do not know it by name.
	declined map[types.UID]map[string]bool
}

// NewSiblings coordinates the node controllers of providers, which
// together serve the providerID schemes of all.
func NewSiblings(all platform.Set, providers []string) *Siblings {
	return &Siblings{all: all, providers: providers, declined: map[types.UID]map[string]bool{}}
}

// speaker is the provider whose controller records the Events about nodes
// no provider serves.
func (s *Siblings) speaker() string { return s.providers[0] }

// nobodys reports whether no provider serves node's providerID scheme.
func (s *Siblings) nobodys(node *corev1.Node) bool {
	return s.all.Of(node) == platform.NotOwned
}

// decline records that provider does not know node by name, and reports
// whether that makes every provider: true exactly once per node, so the
// one Event is recorded once.
func (s *Siblings) decline(node *corev1.Node, provider string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.declined[node.UID]
	if d == nil {
		d = map[string]bool{}
		s.declined[node.UID] = d
	}
	if d[provider] {
		return false
	}
	d[provider] = true
	return len(d) == len(s.providers)
}

// forget drops what was recorded of node: it has a providerID now, or is
// gone.
func (s *Siblings) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.declined, uid)
}
