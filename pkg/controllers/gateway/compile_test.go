package gateway

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/pkg/gateway/dataplane"
)

func TestEffectiveHostnames(t *testing.T) {
	for _, tc := range []struct {
		listener string
		route    []gwv1.Hostname
		want     []string
	}{
		{listener: "", route: nil, want: []string{""}},
		{listener: "", route: []gwv1.Hostname{"a.example.com"}, want: []string{"a.example.com"}},
		{listener: "*.example.com", route: nil, want: []string{"*.example.com"}},
		{listener: "*.example.com", route: []gwv1.Hostname{"a.example.com", "other.org"}, want: []string{"a.example.com"}},
		{listener: "*.example.com", route: []gwv1.Hostname{"*.a.example.com"}, want: []string{"*.a.example.com"}},
		{listener: "*.a.example.com", route: []gwv1.Hostname{"*.example.com"}, want: []string{"*.a.example.com"}},
		{listener: "a.example.com", route: []gwv1.Hostname{"*.example.com"}, want: []string{"a.example.com"}},
		{listener: "example.com", route: []gwv1.Hostname{"*.example.com"}, want: nil},
		{listener: "a.example.com", route: []gwv1.Hostname{"b.example.com"}, want: nil},
	} {
		if got := effectiveHostnames(tc.listener, tc.route); !slices.Equal(got, tc.want) {
			t.Errorf("effectiveHostnames(%q, %v) = %q, want %q", tc.listener, tc.route, got, tc.want)
		}
	}
}

func pathMatch(typ gwv1.PathMatchType, v string) gwv1.HTTPRouteMatch {
	return gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &typ, Value: &v}}
}

// TestPrecedence orders matches as the specification says: exact path,
// longest prefix, method, most headers, most query parameters, oldest
// route, route name, rule order.
func TestPrecedence(t *testing.T) {
	old, young := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	withHeaders := pathMatch(gwv1.PathMatchPathPrefix, "/")
	withHeaders.Headers = []gwv1.HTTPHeaderMatch{{Name: "a", Value: "1"}}
	withMethod := pathMatch(gwv1.PathMatchPathPrefix, "/")
	withMethod.Method = ptr.To(gwv1.HTTPMethodGet)
	entries := []ruleEntry{
		{rule: dataplane.Rule{Route: "young catch-all", Match: pathMatch(gwv1.PathMatchPathPrefix, "/")}, created: young, route: "ns/b"},
		{rule: dataplane.Rule{Route: "headers", Match: withHeaders}, created: young, route: "ns/c"},
		{rule: dataplane.Rule{Route: "old catch-all", Match: pathMatch(gwv1.PathMatchPathPrefix, "/")}, created: old, route: "ns/z"},
		{rule: dataplane.Rule{Route: "method", Match: withMethod}, created: young, route: "ns/d"},
		{rule: dataplane.Rule{Route: "long prefix", Match: pathMatch(gwv1.PathMatchPathPrefix, "/a/b")}, created: young, route: "ns/e"},
		{rule: dataplane.Rule{Route: "exact", Match: pathMatch(gwv1.PathMatchExact, "/a")}, created: young, route: "ns/f"},
		{rule: dataplane.Rule{Route: "short prefix", Match: pathMatch(gwv1.PathMatchPathPrefix, "/a/")}, created: young, route: "ns/g"},
	}
	slices.SortStableFunc(entries, precedence)
	var got []string
	for _, e := range entries {
		got = append(got, e.rule.Route)
	}
	want := []string{"exact", "long prefix", "short prefix", "method", "headers", "old catch-all", "young catch-all"}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}

// TestCompileListeners covers the listener conditions of bad input: an
// unsupported protocol, two listeners in conflict, a certificate missing;
// the other listeners stay valid and programmed.
func TestCompileListeners(t *testing.T) {
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 3},
		Spec: gwv1.GatewaySpec{Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "tls", Port: 8443, Protocol: gwv1.TLSProtocolType},
			{Name: "tcp-on-80", Port: 80, Protocol: gwv1.TCPProtocolType},
			{Name: "http-again", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "missing"}}}},
			{Name: "udp", Port: 53, Protocol: gwv1.UDPProtocolType},
			{Name: "tcp", Port: 53, Protocol: gwv1.TCPProtocolType},
		}},
	}
	res := compile(&world{gateway: gw, services: map[types.NamespacedName]*corev1.Service{}, secrets: map[types.NamespacedName]*corev1.Secret{}})
	want := map[string]struct {
		condition, reason string
		programmed        bool
	}{
		"http":       {string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonProgrammed), true},
		"tls":        {string(gwv1.ListenerConditionAccepted), string(gwv1.ListenerReasonUnsupportedProtocol), false},
		"tcp-on-80":  {string(gwv1.ListenerConditionConflicted), string(gwv1.ListenerReasonProtocolConflict), false},
		"http-again": {string(gwv1.ListenerConditionConflicted), string(gwv1.ListenerReasonHostnameConflict), false},
		"https":      {string(gwv1.ListenerConditionResolvedRefs), string(gwv1.ListenerReasonInvalidCertificateRef), false},
		"udp":        {string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonProgrammed), true},
		"tcp":        {string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonProgrammed), true},
	}
	for _, ls := range res.listeners {
		w := want[string(ls.Name)]
		var c, p *metav1.Condition
		for i := range ls.Conditions {
			switch ls.Conditions[i].Type {
			case w.condition:
				c = &ls.Conditions[i]
			}
			if ls.Conditions[i].Type == string(gwv1.ListenerConditionProgrammed) {
				p = &ls.Conditions[i]
			}
		}
		if c == nil || c.Reason != w.reason || c.ObservedGeneration != 3 {
			t.Errorf("listener %s: %s = %+v, want reason %s", ls.Name, w.condition, c, w.reason)
		}
		if p == nil || (p.Status == metav1.ConditionTrue) != w.programmed {
			t.Errorf("listener %s: Programmed = %+v, want %v", ls.Name, p, w.programmed)
		}
	}
	if res.accepted.Status != metav1.ConditionTrue || res.accepted.Reason != string(gwv1.GatewayReasonListenersNotValid) {
		t.Errorf("Gateway Accepted %+v, want True/ListenersNotValid", res.accepted)
	}
	var ports []string
	for _, p := range res.ports {
		ports = append(ports, p.Name)
	}
	if !slices.Equal(ports, []string{"http-80", "udp-53", "tcp-53"}) {
		t.Errorf("load balancer ports %q, want http-80, udp-53, tcp-53", ports)
	}
}
