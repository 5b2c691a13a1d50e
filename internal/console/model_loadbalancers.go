// The console's view of a LoadBalancer Service: its filter, backends and
// why it is pending.

package console

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
)

// lbMatches says whether the view keeps lb, as the page's filter box
// reads: any of its fields containing the text.
func lbMatches(lb *LoadBalancer, v View) bool {
	if v.NotReady && lb.State == "Ready" {
		return false
	}
	if v.Services == "" {
		return true
	}
	if containsFold(lb.Namespace+"/"+lb.Name, v.Services) || containsFold(lb.State, v.Services) ||
		containsFold(lb.Reason, v.Services) || containsFold(lb.Message, v.Services) {
		return true
	}
	return slices.ContainsFunc(lb.VIPs, func(a string) bool { return containsFold(a, v.Services) })
}

// nodeMatches says whether the view's node filter keeps n.

func lbView(svc *corev1.Service, owners []Owner) LoadBalancer {
	lb := LoadBalancer{
		Namespace:             svc.Namespace,
		Name:                  svc.Name,
		ExternalTrafficPolicy: string(svc.Spec.ExternalTrafficPolicy),
	}
	if lb.ExternalTrafficPolicy == "" {
		lb.ExternalTrafficPolicy = string(corev1.ServiceExternalTrafficPolicyCluster)
	}
	if svc.Spec.LoadBalancerClass != nil {
		lb.Class = *svc.Spec.LoadBalancerClass
	}
	for _, p := range svc.Spec.Ports {
		lb.Ports = append(lb.Ports, Port{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, NodePort: p.NodePort})
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		switch {
		case in.IP != "":
			lb.VIPs = append(lb.VIPs, in.IP)
		case in.Hostname != "":
			lb.VIPs = append(lb.VIPs, in.Hostname)
		}
	}
	for _, c := range svc.Status.Conditions {
		lb.Conditions = append(lb.Conditions, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	ready := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady)
	switch {
	case !servedClass(&lb, owners):
		lb.State = "Elsewhere"
		lb.Reason = "OtherClass"
		handled := make([]string, 0, len(owners))
		for _, o := range owners {
			if o.Class == "" {
				handled = append(handled, "Services without a class")
			} else {
				handled = append(handled, fmt.Sprintf("class %q", o.Class))
			}
		}
		lb.Message = fmt.Sprintf("spec.loadBalancerClass is %q: another controller provisions it (this Outrigger handles %s)", lb.Class, strings.Join(handled, ", "))
	case len(lb.VIPs) == 0:
		lb.State = "Pending"
		if ready != nil && ready.Status != "True" {
			lb.Reason, lb.Message = ready.Reason, ready.Message
		}
	case ready != nil && ready.Status != "True":
		lb.State = "Degraded"
		lb.Reason, lb.Message = ready.Reason, ready.Message
	default:
		lb.State = "Ready"
	}
	return lb
}

// pendingWhy explains a pending Service without a condition: the latest
// Warning Event if there is one, else that the controller has not got to
// it yet.
func pendingWhy(events []Entry) (string, string) {
	if reason, msg := warningWhy(events); reason != "" {
		return reason, msg
	}
	return "NotSyncedYet", "Waiting for the service controller: no LoadBalancerReady condition and no Warning Event yet"
}

// backendNode is what the backend lists need of a node, worked out once
// per snapshot rather than once per Service (5,000 nodes times 1,000
// Services is a lot of condition scans).
type backendNode struct {
	name  string
	ip    netip.Addr
	ready bool
}

func backendNodes(nodes []*corev1.Node) ([]backendNode, int) {
	var out []backendNode
	ready := 0
	for _, n := range nodes {
		if !service.IsBackend(n) {
			continue
		}
		b := backendNode{name: n.Name, ready: nodeReady(n)}
		b.ip, _ = netip.ParseAddr(internalIP(n))
		if b.ready {
			ready++
		}
		out = append(out, b)
	}
	return out, ready
}

// backendsOf lists the Service's backend nodes, unhealthy ones first, at
// most maxBackendsListed, and counts them all. With externalTrafficPolicy
// Local a node takes traffic only with a ready endpoint of the Service on
// it (the load balancer's health check fails elsewhere); with Cluster,
// every Ready node does.
func backendsOf(svc *corev1.Service, nodes []backendNode, readyCount int, endpoints map[string]bool) ([]Backend, int, int) {
	local := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	var nodePort int32
	if len(svc.Spec.Ports) > 0 {
		nodePort = svc.Spec.Ports[0].NodePort
	}
	view := func(n backendNode) Backend {
		b := Backend{Node: n.name, Healthy: true}
		if n.ip.IsValid() && nodePort != 0 {
			b.Target = netip.AddrPortFrom(n.ip, uint16(nodePort)).String()
		}
		switch {
		case !n.ready:
			b.Healthy, b.Why = false, "node is not Ready"
		case local && !endpoints[n.name]:
			b.Healthy, b.Why = false, "no ready endpoint on this node (externalTrafficPolicy Local)"
		}
		return b
	}
	healthy := readyCount
	if local {
		healthy = 0
		for _, n := range nodes {
			if n.ready && endpoints[n.name] {
				healthy++
			}
		}
	}
	// Stop as soon as the list is settled: every unhealthy node found (or
	// enough of them), and enough healthy ones.
	unhealthy := len(nodes) - healthy
	var bad, good []Backend
	for _, n := range nodes {
		if len(bad) == min(unhealthy, maxBackendsListed) && len(good) >= maxBackendsListed-len(bad) {
			break
		}
		if !n.ready || (local && !endpoints[n.name]) {
			bad = append(bad, view(n))
		} else if len(good) < maxBackendsListed {
			good = append(good, view(n))
		}
	}
	list := append(bad, good...)
	if len(list) > maxBackendsListed {
		list = list[:maxBackendsListed]
	}
	return list, len(nodes), healthy
}

// servedClass finds the provider serving lb's class and records it in lb.
func servedClass(lb *LoadBalancer, owners []Owner) bool {
	for _, o := range owners {
		if o.Class == lb.Class {
			lb.Provider = o.Provider
			return true
		}
	}
	return false
}
