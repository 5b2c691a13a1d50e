package service

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ToBeDeletedTaint is the taint Cluster Autoscaler puts on a node it is
// about to remove.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// IsBackend reports whether node may serve load balancer traffic: every node
// except one being deleted, labelled node.kubernetes.io/exclude-from-external-load-balancers
// (read as a boolean, so "false" keeps the node, and an unparsable value
// excludes it, as upstream) or tainted for removal by Cluster Autoscaler.
// Readiness does not count (KEP-3458): kube-proxy health checks take a
// node out of rotation far faster than rewriting every load balancer would.
func IsBackend(node *corev1.Node) bool {
	if node.DeletionTimestamp != nil {
		return false
	}
	if v, ok := node.Labels[corev1.LabelNodeExcludeBalancers]; ok {
		exclude, err := strconv.ParseBool(v)
		if err != nil || exclude {
			return false
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

// backendChanged reports whether an update of a node can change what a
// load balancer forwards to: membership, the providerID clouds key backends
// by, or the addresses traffic goes to.
func backendChanged(old, cur *corev1.Node) bool {
	if IsBackend(old) != IsBackend(cur) {
		return true
	}
	if old.Spec.ProviderID != cur.Spec.ProviderID {
		return true
	}
	return !slices.Equal(internalIPs(old), internalIPs(cur))
}

func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

// fingerprint identifies a backend set: the same nodes with the same
// providerIDs and addresses give the same string.
func fingerprint(nodes []*corev1.Node) string {
	var b strings.Builder
	for _, n := range nodes {
		b.WriteString(n.Name)
		b.WriteByte('|')
		b.WriteString(n.Spec.ProviderID)
		for _, ip := range internalIPs(n) {
			b.WriteByte('|')
			b.WriteString(ip)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
