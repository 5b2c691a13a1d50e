// The console's view of a Node: its state, owner and filter.

package console

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// nodeMatches says whether the view's node filter keeps n.
func nodeMatches(n *corev1.Node, state, q string) bool {
	if q == "" {
		return true
	}
	for _, f := range []string{n.Name, n.Labels[corev1.LabelTopologyZone], state, n.Spec.ProviderID, n.Labels[corev1.LabelInstanceTypeStable]} {
		if containsFold(f, q) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains q, q being lower case already.
func containsFold(s, q string) bool {
	return strings.Contains(strings.ToLower(s), q)
}

func nodeView(n *corev1.Node) Node {
	v := Node{
		Name:         n.Name,
		ProviderID:   n.Spec.ProviderID,
		Zone:         n.Labels[corev1.LabelTopologyZone],
		Region:       n.Labels[corev1.LabelTopologyRegion],
		InstanceType: n.Labels[corev1.LabelInstanceTypeStable],
		PodCIDRs:     n.Spec.PodCIDRs,
		Initialized:  !hasTaint(n, taintUninitialized),
		Ready:        nodeReady(n),
		State:        nodeState(n),
	}
	for _, a := range n.Status.Addresses {
		v.Addresses = append(v.Addresses, string(a.Type)+" "+a.Address)
	}
	return v
}

// nodeState sums up a node's lifecycle without building its row: every
// node is counted, 200 are shown.
func nodeState(n *corev1.Node) string {
	switch {
	case !n.DeletionTimestamp.IsZero():
		return "Terminating"
	case hasTaint(n, taintUninitialized):
		return "Uninitialized"
	case hasTaint(n, taintShutdown):
		return "Shutdown"
	case nodeReady(n):
		return "Ready"
	}
	return "NotReady"
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// nodeOwner is the provider serving node's providerID scheme, or "".
func nodeOwner(node *corev1.Node, owners []Owner) string {
	scheme, _, hasScheme := strings.Cut(node.Spec.ProviderID, "://")
	for _, o := range owners {
		if len(o.Platforms) == 0 || hasScheme && slices.Contains(o.Platforms, scheme) {
			return o.Provider
		}
	}
	return ""
}
