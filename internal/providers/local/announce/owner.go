// Package announce serves the local provider's load balancers from the
// nodes (cloud-config dataPlane: nodes), as a bare-metal L2 load balancer
// does: one eligible node per VIP holds the address and answers ARP for it,
// and kube-proxy on that node delivers the packets (the ingress has ipMode
// VIP, so kube-proxy captures the VIP). It runs on every node, as the
// outrigger-local-lb DaemonSet; every instance computes the same owner for
// each VIP from the API (no coordination between them).
package announce

import (
	"crypto/sha256"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
)

// excludeLabel keeps a node out of every load balancer, as upstream's
// service controller does.
const excludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

// VIPs returns the pool addresses of a Service's load balancer that the
// nodes serve: a type LoadBalancer Service of the default class, not being
// deleted, with ingress IPs in the pool.
func VIPs(svc *corev1.Service, pool netip.Prefix) []netip.Addr {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass != nil || svc.DeletionTimestamp != nil {
		return nil
	}
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ip, err := netip.ParseAddr(ing.IP); err == nil && pool.Contains(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// Owner is the node that announces vip for svc, or "" when no node may:
// among the Ready nodes not excluded from load balancers (with
// externalTrafficPolicy: Local, only those running a ready endpoint of the
// Service, which kube-proxy would otherwise drop), the one whose hash with
// the VIP is lowest. Hashing spreads VIPs over the nodes and moves only the
// VIPs of a node that leaves.
func Owner(svc *corev1.Service, vip netip.Addr, nodes []*corev1.Node, slices []*discoveryv1.EndpointSlice) string {
	var local map[string]bool
	if servicehelpers.RequestsOnlyLocalTraffic(svc) {
		local = map[string]bool{}
		for _, es := range slices {
			if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name {
				continue
			}
			for _, ep := range es.Endpoints {
				if ep.NodeName != nil && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					local[*ep.NodeName] = true
				}
			}
		}
	}
	best, bestHash := "", [sha256.Size]byte{}
	for _, n := range nodes {
		if !eligible(n) || (local != nil && !local[n.Name]) {
			continue
		}
		h := sha256.Sum256([]byte(n.Name + "|" + vip.String()))
		if best == "" || string(h[:]) < string(bestHash[:]) {
			best, bestHash = n.Name, h
		}
	}
	return best
}

func eligible(n *corev1.Node) bool {
	if n.DeletionTimestamp != nil {
		return false
	}
	if _, excluded := n.Labels[excludeLabel]; excluded {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
