package announce

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/testobj"
)

func node(name string, ready bool, labels map[string]string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}},
	}
}

func lbService(policy corev1.ServiceExternalTrafficPolicy, ips ...string) *corev1.Service {
	return testobj.LBService("ns", "web", testobj.TrafficPolicy(policy), testobj.Ingress(ips...))
}

func slice(svc string, endpoints map[string]bool) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}}}
	for n, ready := range endpoints {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{NodeName: ptr.To(n), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}})
	}
	return es
}

func TestOwner(t *testing.T) {
	vip := netip.MustParseAddr("198.18.100.1")
	a, b, c := node("a", true, nil), node("b", true, nil), node("c", true, nil)
	// The owner among all three, whichever the hash picks.
	all := Owner(lbService(corev1.ServiceExternalTrafficPolicyCluster), vip, []*corev1.Node{a, b, c}, nil)
	others := map[string][]*corev1.Node{"a": {b, c}, "b": {a, c}, "c": {a, b}}[all]
	tests := []struct {
		name   string
		svc    *corev1.Service
		nodes  []*corev1.Node
		slices []*discoveryv1.EndpointSlice
		want   string
	}{
		{"order does not matter", lbService(corev1.ServiceExternalTrafficPolicyCluster), []*corev1.Node{c, b, a}, nil, all},
		{"cluster policy: any ready node", lbService(corev1.ServiceExternalTrafficPolicyCluster), others, nil, Owner(lbService(""), vip, others, nil)},
		{"not ready nodes never", lbService(corev1.ServiceExternalTrafficPolicyCluster), []*corev1.Node{node("a", false, nil), node("b", false, nil)}, nil, ""},
		{"excluded nodes never", lbService(corev1.ServiceExternalTrafficPolicyCluster), []*corev1.Node{node("a", true, map[string]string{excludeLabel: ""}), b}, nil, "b"},
		{"local policy: only nodes with a ready endpoint", lbService(corev1.ServiceExternalTrafficPolicyLocal), []*corev1.Node{a, b, c}, []*discoveryv1.EndpointSlice{slice("web", map[string]bool{"b": true, "c": false})}, "b"},
		{"local policy: endpoints of another Service do not count", lbService(corev1.ServiceExternalTrafficPolicyLocal), []*corev1.Node{a, b, c}, []*discoveryv1.EndpointSlice{slice("other", map[string]bool{"a": true})}, ""},
		{"local policy: a not-ready node with an endpoint does not count", lbService(corev1.ServiceExternalTrafficPolicyLocal), []*corev1.Node{node("a", false, nil), b}, []*discoveryv1.EndpointSlice{slice("web", map[string]bool{"a": true})}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Owner(tt.svc, vip, tt.nodes, tt.slices); got != tt.want {
				t.Fatalf("Owner = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVIPs(t *testing.T) {
	pool := netip.MustParsePrefix("198.18.100.0/24")
	deleting := lbService("", "198.18.100.3")
	deleting.DeletionTimestamp = &metav1.Time{}
	classed := lbService("", "198.18.100.4")
	classed.Spec.LoadBalancerClass = ptr.To("example.com/other")
	clusterIP := lbService("", "198.18.100.5")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	tests := []struct {
		name string
		svc  *corev1.Service
		want int
	}{
		{"in the pool", lbService("", "198.18.100.2", "198.19.0.9"), 1},
		{"being deleted", deleting, 0},
		{"another class", classed, 0},
		{"not a load balancer", clusterIP, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VIPs(tt.svc, pool); len(got) != tt.want {
				t.Fatalf("VIPs = %v, want %d", got, tt.want)
			}
		})
	}
}
