// Package platform decides which nodes are this Outrigger's: those whose
// providerID scheme (the part before "://", KEP-5778's "platform") it
// serves. Clusters mix platforms (cloud VMs beside bare-metal or virtual
// nodes, or two clouds, each with its own CCM); a node of another platform
// is never initialized, refreshed, tainted, deleted, routed, given a pod
// CIDR or used as a load balancer backend: Outrigger writes nothing to it.
//
// With no platforms given (--cloud-provider-platforms empty), every node is
// Outrigger's, as with upstream's single-provider CCM.
package platform

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Ownership is what a Set says about one node.
type Ownership int

const (
	// Owned: the node's providerID scheme is served (or every node is).
	Owned Ownership = iota
	// NotOwned: the node's providerID has another scheme.
	NotOwned
	// Undecided: the node has no providerID yet; its kubelet may still set
	// one, or the provider may know it by name (see the node controller).
	Undecided
)

func (o Ownership) String() string {
	switch o {
	case Owned:
		return "owned"
	case NotOwned:
		return "not owned"
	}
	return "undecided"
}

// Set is the providerID schemes served; the zero Set serves every node.
type Set struct {
	schemes []string
}

// schemeSyntax is RFC 3986's scheme, lower case (providerIDs use lower case).
var schemeSyntax = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// Parse validates schemes (each a URI scheme such as "aws" or "sim", given
// once) and returns their Set; none gives the Set of every node.
func Parse(schemes []string) (Set, error) {
	var s Set
	for _, sc := range schemes {
		switch {
		case !schemeSyntax.MatchString(sc):
			return Set{}, fmt.Errorf("%q is not a providerID scheme (the part before \"://\": lower-case letters, digits, '+', '-', '.', starting with a letter)", sc)
		case slices.Contains(s.schemes, sc):
			return Set{}, fmt.Errorf("%q is given twice", sc)
		}
		s.schemes = append(s.schemes, sc)
	}
	return s, nil
}

// All reports whether every node is served.
func (s Set) All() bool { return len(s.schemes) == 0 }

// Schemes returns the schemes served (none: every node).
func (s Set) Schemes() []string { return slices.Clone(s.schemes) }

// Scheme returns the part of providerID before "://", or "" when it has
// none.
func Scheme(providerID string) string {
	scheme, _, ok := strings.Cut(providerID, "://")
	if !ok {
		return ""
	}
	return scheme
}

// ServesID reports whether a providerID is served.
func (s Set) ServesID(providerID string) bool {
	return s.All() || slices.Contains(s.schemes, Scheme(providerID))
}

// Of says whether node is served.
func (s Set) Of(node *corev1.Node) Ownership {
	switch {
	case s.All():
		return Owned
	case node.Spec.ProviderID == "":
		return Undecided
	case s.ServesID(node.Spec.ProviderID):
		return Owned
	}
	return NotOwned
}

// Owns reports whether node is certainly served: Owned.
func (s Set) Owns(node *corev1.Node) bool { return s.Of(node) == Owned }
