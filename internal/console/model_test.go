package console

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/testobj"
)

func lbService(name string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := testobj.LBService("default", name, testobj.NodePort(80, 30080))
	for _, m := range mutate {
		m(s)
	}
	return s
}

func withVIP(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}} }
}

func withCondition(status metav1.ConditionStatus, reason, msg string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{{Type: "LoadBalancerReady", Status: status, Reason: reason, Message: msg}}
	}
}

func testNode(name, ip string, ready bool, mutate ...func(*corev1.Node)) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "z1", corev1.LabelInstanceTypeStable: "sim.small"}},
		Spec:       corev1.NodeSpec{ProviderID: "sim://" + name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func warningEvent(svc, reason, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: svc + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: svc},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: msg,
		LastTimestamp: metav1.NewTime(at), Source: corev1.EventSource{Component: "service-controller"},
	}
}

func TestLoadBalancerState(t *testing.T) {
	now := time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC)
	cases := []struct {
		name        string
		svc         *corev1.Service
		events      []*corev1.Event
		class       string
		wantState   string
		wantReason  string
		wantMessage string
	}{
		{name: "ready", svc: lbService("web", withVIP("127.0.100.1")), wantState: "Ready"},
		{name: "pending with condition", svc: lbService("web", withCondition("False", "QuotaExceeded", "the local pool 127.0.100.0/30 is used up")),
			wantState: "Pending", wantReason: "QuotaExceeded", wantMessage: "the local pool 127.0.100.0/30 is used up"},
		{name: "pending with only a warning event", svc: lbService("web"),
			events:    []*corev1.Event{warningEvent("web", "SyncLoadBalancerFailed", "boom", now)},
			wantState: "Pending", wantReason: "SyncLoadBalancerFailed", wantMessage: "boom"},
		{name: "pending, nothing yet", svc: lbService("web"), wantState: "Pending", wantReason: "NotSyncedYet",
			wantMessage: "Waiting for the service controller: no LoadBalancerReady condition and no Warning Event yet"},
		{name: "address but no nodes", svc: lbService("web", withVIP("127.0.100.1"), withCondition("False", "NoNodes", "no node can receive traffic")),
			wantState: "Degraded", wantReason: "NoNodes", wantMessage: "no node can receive traffic"},
		{name: "other class", svc: lbService("web", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }),
			wantState: "Elsewhere", wantReason: "OtherClass",
			wantMessage: `spec.loadBalancerClass is "example.com/other": another controller provisions it (this Outrigger handles Services without a class)`},
		{name: "our class", svc: lbService("web", withVIP("127.0.100.1"), func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("outrigger") }),
			class: "outrigger", wantState: "Ready"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := build(inputs{now: now, services: []*corev1.Service{tc.svc, {ObjectMeta: metav1.ObjectMeta{Name: "cluster-ip"}}}, events: tc.events, owners: []Owner{{Class: tc.class}}})
			if len(s.LoadBalancers) != 1 {
				t.Fatalf("want only the LoadBalancer Service, got %d", len(s.LoadBalancers))
			}
			lb := s.LoadBalancers[0]
			if lb.State != tc.wantState || lb.Reason != tc.wantReason || lb.Message != tc.wantMessage {
				t.Errorf("got %s/%s %q, want %s/%s %q", lb.State, lb.Reason, lb.Message, tc.wantState, tc.wantReason, tc.wantMessage)
			}
		})
	}
}

func TestBackends(t *testing.T) {
	nodes := []*corev1.Node{
		testNode("node-1", "127.1.0.1", true),
		testNode("node-2", "127.1.0.2", false),
		testNode("node-3", "127.1.0.3", true),
		testNode("excluded", "127.1.0.4", true, func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "true" }),
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"198.18.1.5"}, NodeName: ptr.To("node-3"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"198.18.0.7"}, NodeName: ptr.To("node-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	cases := []struct {
		policy      corev1.ServiceExternalTrafficPolicy
		wantHealthy []string
		wantBad     map[string]string
	}{
		{policy: corev1.ServiceExternalTrafficPolicyCluster, wantHealthy: []string{"node-1", "node-3"},
			wantBad: map[string]string{"node-2": "node is not Ready"}},
		{policy: corev1.ServiceExternalTrafficPolicyLocal, wantHealthy: []string{"node-3"},
			wantBad: map[string]string{"node-1": "no ready endpoint on this node (externalTrafficPolicy Local)", "node-2": "node is not Ready"}},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			svc := lbService("web", withVIP("127.0.100.1"), func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = tc.policy })
			lb := build(inputs{services: []*corev1.Service{svc}, nodes: nodes, slices: []*discoveryv1.EndpointSlice{slice}}).LoadBalancers[0]
			var healthy []string
			bad := map[string]string{}
			for _, b := range lb.Backends {
				if b.Healthy {
					healthy = append(healthy, b.Node)
				} else {
					bad[b.Node] = b.Why
				}
			}
			slices.Sort(healthy)
			if !slices.Equal(healthy, tc.wantHealthy) || len(bad) != len(tc.wantBad) {
				t.Fatalf("healthy %v, unhealthy %v; want %v and %v", healthy, bad, tc.wantHealthy, tc.wantBad)
			}
			for n, why := range tc.wantBad {
				if bad[n] != why {
					t.Errorf("%s: why %q, want %q", n, bad[n], why)
				}
			}
			if lb.BackendsTotal != 3 || lb.BackendsHealthy != len(tc.wantHealthy) {
				t.Errorf("counts %d/%d, want %d/3", lb.BackendsHealthy, lb.BackendsTotal, len(tc.wantHealthy))
			}
			if lb.Backends[0].Healthy {
				t.Errorf("unhealthy backends are listed first: %+v", lb.Backends)
			}
			if lb.Backends[len(lb.Backends)-1].Target == "" || len(lb.Endpoints) != 2 {
				t.Errorf("targets and endpoints: %+v %+v", lb.Backends, lb.Endpoints)
			}
		})
	}
}

func TestBackendsListBounded(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 100 {
		nodes = append(nodes, testNode(string(rune('a'+i%26))+string(rune('a'+i/26)), "127.1.1.1", i%10 != 0))
	}
	lb := build(inputs{services: []*corev1.Service{lbService("web", withVIP("127.0.100.1"))}, nodes: nodes}).LoadBalancers[0]
	if len(lb.Backends) != maxBackendsListed || lb.BackendsTotal != 100 || lb.BackendsHealthy != 90 {
		t.Fatalf("listed %d, total %d, healthy %d", len(lb.Backends), lb.BackendsTotal, lb.BackendsHealthy)
	}
	for i, b := range lb.Backends {
		if b.Healthy != (i >= 10) {
			t.Fatalf("backend %d: healthy %v; the 10 unhealthy come first", i, b.Healthy)
		}
	}
}

func TestNodeState(t *testing.T) {
	cases := []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"ready", testNode("n", "127.1.0.1", true), "Ready"},
		{"not ready", testNode("n", "127.1.0.1", false), "NotReady"},
		{"uninitialized", testNode("n", "127.1.0.1", true, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: taintUninitialized, Effect: corev1.TaintEffectNoSchedule}}
		}), "Uninitialized"},
		{"shutdown", testNode("n", "127.1.0.1", false, func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: taintShutdown, Effect: corev1.TaintEffectNoSchedule}}
		}), "Shutdown"},
		{"terminating", testNode("n", "127.1.0.1", true, func(n *corev1.Node) {
			n.DeletionTimestamp = ptr.To(metav1.Now())
		}), "Terminating"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := nodeView(tc.node)
			if v.State != tc.want {
				t.Errorf("state %s, want %s", v.State, tc.want)
			}
			if v.Zone != "z1" || v.InstanceType != "sim.small" || v.ProviderID != "sim://n" {
				t.Errorf("identity: %+v", v)
			}
		})
	}
}

func TestPools(t *testing.T) {
	services := []*corev1.Service{
		lbService("a", withVIP("127.0.100.1")),
		lbService("b", withVIP("127.0.100.7")),
		lbService("elsewhere", withVIP("192.0.2.1")),
	}
	nodes := []*corev1.Node{
		testNode("n1", "127.1.0.1", true, func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"198.18.0.0/24", "fd00:10:244::/64"} }),
		testNode("n2", "127.1.0.2", true, func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"198.18.3.0/24", "fd00:10:244:0:0:0:0:0/64"} }),
	}
	ranges, err := ParseRanges([]string{"lb=127.0.100.0/24", "pods-v4=198.18.0.0/16@24", "pods-v6=fd00:10:244::/56@64", "wide=fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		pool     string
		size     int64
		used     int
		indexes  []int64
		firstOwn string
	}{
		{"lb", 256, 2, []int64{1, 7}, "Service/default/a"},
		{"pods-v4", 256, 2, []int64{0, 3}, "Node/n1"},
		{"pods-v6", 256, 2, []int64{0, 0}, "Node/n1"},
		{"wide", maxPoolSize, 0, nil, ""},
	}
	s := build(inputs{services: services, nodes: nodes, ranges: ranges})
	for i, tc := range cases {
		t.Run(tc.pool, func(t *testing.T) {
			p := s.Pools[i]
			var idx []int64
			for _, sl := range p.Taken {
				idx = append(idx, sl.Index)
			}
			if p.Name != tc.pool || p.Size != tc.size || p.Used != tc.used || !slices.Equal(idx, tc.indexes) {
				t.Fatalf("got %s size %d used %d at %v, want %s %d %d at %v", p.Name, p.Size, p.Used, idx, tc.pool, tc.size, tc.used, tc.indexes)
			}
			if tc.used > 0 && p.Taken[0].Owner != tc.firstOwn {
				t.Errorf("owner %s, want %s", p.Taken[0].Owner, tc.firstOwn)
			}
		})
	}
}

func TestParseRangesRejects(t *testing.T) {
	for _, spec := range []string{"nocidr", "x=300.0.0.0/8", "x=198.18.0.0/16@8", "x=198.18.0.0/16@33", "x=198.18.0.0/16@abc"} {
		if _, err := ParseRanges([]string{spec}); err == nil {
			t.Errorf("%q: no error", spec)
		}
	}
	r, err := ParseRanges([]string{"p=127.0.100.9/24"})
	if err != nil || r[0].Prefix != netip.MustParsePrefix("127.0.100.0/24") {
		t.Errorf("got %v, %v; want the prefix masked", r, err)
	}
}

func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC)
	var events []*corev1.Event
	for i := range maxEventsPerObject + 3 {
		events = append(events, warningEvent("web", "R"+string(rune('a'+i)), "m", t0.Add(time.Duration(i)*time.Second)))
	}
	calls := []Entry{{Time: t0.Add(time.Hour), Kind: "calls", Type: "Warning", Object: "Cloud/EnsureLoadBalancer", Reason: "Throttled"}}
	s := build(inputs{services: []*corev1.Service{lbService("web")}, events: events, calls: calls})
	if got := s.Timeline[0]; got.Kind != "calls" {
		t.Errorf("newest first: got %+v", got)
	}
	if len(s.Timeline) != len(events)+1 {
		t.Errorf("timeline has %d entries, want %d", len(s.Timeline), len(events)+1)
	}
	lb := s.LoadBalancers[0]
	if len(lb.Events) != maxEventsPerObject || lb.Events[0].Reason != "Rh" {
		t.Errorf("the Service's last Events: %+v", lb.Events)
	}
	if lb.Reason != "Rh" {
		t.Errorf("a pending Service without condition explains itself with its newest Warning, got %q", lb.Reason)
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// BenchmarkBuild builds the snapshot of 1,000 Services on 5,000 nodes, the
// scale docs/console.md records.
func BenchmarkBuild(b *testing.B) {
	var nodes []*corev1.Node
	for i := range 5000 {
		nodes = append(nodes, testNode(fmt.Sprintf("node-%d", i), netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)}).String(), i%50 != 0))
	}
	var services []*corev1.Service
	for i := range 1000 {
		svc := lbService(fmt.Sprintf("svc-%d", i), withVIP(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}).String()))
		if i%2 == 0 {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		services = append(services, svc)
	}
	ranges, _ := ParseRanges([]string{"vips=198.18.0.0/20"})
	in := inputs{services: services, nodes: nodes, ranges: ranges}
	for b.Loop() {
		build(in)
	}
}
