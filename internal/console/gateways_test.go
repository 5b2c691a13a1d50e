package console

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

func gatewayClass(name, controller string) *gwv1.GatewayClass {
	return &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)}}
}

func testGateway(name, class string, mutate ...func(*gwv1.Gateway)) *gwv1.Gateway {
	g := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-default-" + name)},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: []gwv1.Listener{
			{Name: "http", Protocol: gwv1.HTTPProtocolType, Port: 80},
			{Name: "tcp", Protocol: gwv1.TCPProtocolType, Port: 5432},
		}},
	}
	for _, m := range mutate {
		m(g)
	}
	return g
}

func gwCondition(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

func withGatewayConditions(cs ...metav1.Condition) func(*gwv1.Gateway) {
	return func(g *gwv1.Gateway) { g.Status.Conditions = cs }
}

func withAddress(a string) func(*gwv1.Gateway) {
	return func(g *gwv1.Gateway) {
		g.Status.Addresses = append(g.Status.Addresses, gwv1.GatewayStatusAddress{Type: ptr.To(gwv1.IPAddressType), Value: a})
	}
}

func withListenerStatus(name string, attached int32, cs ...metav1.Condition) func(*gwv1.Gateway) {
	return func(g *gwv1.Gateway) {
		g.Status.Listeners = append(g.Status.Listeners, gwv1.ListenerStatus{Name: gwv1.SectionName(name), AttachedRoutes: attached, Conditions: cs})
	}
}

var (
	accepted   = gwCondition("Accepted", "True", "Accepted", "")
	programmed = gwCondition("Programmed", "True", "Programmed", "")
)

func TestGatewayState(t *testing.T) {
	now := time.Date(2026, 11, 24, 2, 0, 0, 0, time.UTC)
	ours := string(gateway.ControllerNameFor("sim", ""))
	classes := []*gwv1.GatewayClass{gatewayClass("outrigger-sim", ours), gatewayClass("other", "example.com/gateway")}
	gwEvent := func(reason, msg string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "web." + reason},
			InvolvedObject: corev1.ObjectReference{Kind: "Gateway", Namespace: "default", Name: "web"},
			Type:           corev1.EventTypeWarning, Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(now),
		}
	}
	cases := []struct {
		name         string
		gw           *gwv1.Gateway
		events       []*corev1.Event
		wantState    string
		wantReason   string
		wantMessage  string
		wantOurs     bool
		wantProvider string
	}{
		{name: "programmed", gw: testGateway("web", "outrigger-sim", withGatewayConditions(accepted, programmed), withAddress("198.18.0.1")),
			wantState: "Programmed", wantOurs: true, wantProvider: "sim"},
		{name: "not programmed: the load balancer is pending",
			gw:        testGateway("web", "outrigger-sim", withGatewayConditions(accepted, gwCondition("Programmed", "False", "AddressNotAssigned", "the load balancer is pending: QuotaExceeded"))),
			wantState: "NotProgrammed", wantReason: "AddressNotAssigned", wantMessage: "the load balancer is pending: QuotaExceeded", wantOurs: true, wantProvider: "sim"},
		{name: "not accepted",
			gw:        testGateway("web", "outrigger-sim", withGatewayConditions(gwCondition("Accepted", "False", "InvalidParameters", "parametersRef is not supported"), gwCondition("Programmed", "False", "Invalid", "not accepted"))),
			wantState: "NotAccepted", wantReason: "InvalidParameters", wantMessage: "parametersRef is not supported", wantOurs: true, wantProvider: "sim"},
		{name: "a listener not programmed",
			gw: testGateway("web", "outrigger-sim", withGatewayConditions(accepted, programmed),
				withListenerStatus("http", 1, gwCondition("Accepted", "True", "Accepted", ""), gwCondition("Programmed", "True", "Programmed", "")),
				withListenerStatus("tcp", 0, gwCondition("ResolvedRefs", "False", "InvalidCertificateRef", "Secret default/cert does not exist"))),
			wantState: "Degraded", wantReason: "InvalidCertificateRef", wantMessage: "listener tcp: Secret default/cert does not exist", wantOurs: true, wantProvider: "sim"},
		{name: "a listener conflicted",
			gw: testGateway("web", "outrigger-sim", withGatewayConditions(accepted, programmed),
				withListenerStatus("http", 1, gwCondition("Conflicted", "True", "HostnameConflict", "same port and hostname as another"))),
			wantState: "Degraded", wantReason: "HostnameConflict", wantMessage: "listener http: same port and hostname as another", wantOurs: true, wantProvider: "sim"},
		{name: "default status: nobody wrote any",
			gw:        testGateway("web", "other", withGatewayConditions(gwCondition("Accepted", "Unknown", "Pending", "Waiting for controller"))),
			wantState: "Pending", wantReason: "Pending", wantMessage: "no controller has written this Gateway's status yet (class other, controller example.com/gateway)"},
		{name: "pending with a warning Event", gw: testGateway("web", "outrigger-sim"), events: []*corev1.Event{gwEvent("SyncLoadBalancerFailed", "boom")},
			wantState: "Pending", wantReason: "SyncLoadBalancerFailed", wantMessage: "boom", wantOurs: true, wantProvider: "sim"},
		{name: "no such class", gw: testGateway("web", "missing"),
			wantState: "Pending", wantReason: "NoSuchClass", wantMessage: `GatewayClass "missing" does not exist: no controller serves this Gateway`},
		{name: "another controller's, programmed", gw: testGateway("web", "other", withGatewayConditions(accepted, programmed)), wantState: "Programmed"},
		{name: "another Outrigger's", gw: testGateway("web", "outrigger-other", withGatewayConditions(accepted, programmed)), wantState: "Programmed", wantOurs: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cls := append(classes, gatewayClass("outrigger-other", string(gateway.ControllerNameFor("hcloud", ""))))
			s := build(inputs{now: now, gateways: gatewayInputs{classes: cls, gateways: []*gwv1.Gateway{tc.gw}}, events: tc.events,
				owners: []Owner{{Provider: "sim"}}})
			if len(s.Gateways) != 1 {
				t.Fatalf("want one Gateway, got %d", len(s.Gateways))
			}
			g := s.Gateways[0]
			if g.State != tc.wantState || g.Reason != tc.wantReason || g.Message != tc.wantMessage {
				t.Errorf("got %s/%s %q, want %s/%s %q", g.State, g.Reason, g.Message, tc.wantState, tc.wantReason, tc.wantMessage)
			}
			if g.Outrigger != tc.wantOurs || g.Provider != tc.wantProvider {
				t.Errorf("Outrigger's: %v, provider %q; want %v, %q", g.Outrigger, g.Provider, tc.wantOurs, tc.wantProvider)
			}
			wantReady := 0
			if tc.wantState == "Programmed" {
				wantReady = 1
			}
			if s.GatewayCount != (Count{Total: 1, Ready: wantReady, Matching: 1}) {
				t.Errorf("count %+v", s.GatewayCount)
			}
		})
	}
}

func TestGatewayListenersAndAddresses(t *testing.T) {
	gw := testGateway("web", "c", withGatewayConditions(accepted, programmed), withAddress("198.18.0.1"), withAddress("2001:db8::1"),
		withListenerStatus("tcp", 2, accepted, programmed), withListenerStatus("http", 3, accepted, programmed))
	gw.Spec.Listeners[0].Hostname = ptr.To(gwv1.Hostname("*.example.com"))
	s := build(inputs{gateways: gatewayInputs{classes: []*gwv1.GatewayClass{gatewayClass("c", "outrigger.dev/sim")}, gateways: []*gwv1.Gateway{gw}}})
	g := s.Gateways[0]
	if fmt.Sprint(g.Addresses) != "[198.18.0.1 2001:db8::1]" {
		t.Errorf("addresses %v", g.Addresses)
	}
	want := []Listener{
		{Name: "http", Protocol: "HTTP", Port: 80, Hostname: "*.example.com", AttachedRoutes: 3},
		{Name: "tcp", Protocol: "TCP", Port: 5432, AttachedRoutes: 2},
	}
	if len(g.Listeners) != len(want) {
		t.Fatalf("listeners %+v", g.Listeners)
	}
	for i, l := range g.Listeners {
		if l.Name != want[i].Name || l.Protocol != want[i].Protocol || l.Port != want[i].Port || l.Hostname != want[i].Hostname ||
			l.AttachedRoutes != want[i].AttachedRoutes || len(l.Conditions) != 2 || l.Problem != "" {
			t.Errorf("listener %d: got %+v, want %+v with two conditions", i, l, want[i])
		}
	}
}

func httpRoute(ns, name string, hostnames []string, parents []gwv1.ParentReference, status ...gwv1.RouteParentStatus) *gwv1.HTTPRoute {
	r := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	r.Spec.ParentRefs = parents
	for _, h := range hostnames {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Status.Parents = status
	return r
}

func grpcRoute(ns, name string, hostnames []string, parents []gwv1.ParentReference, status ...gwv1.RouteParentStatus) *gwv1.GRPCRoute {
	r := &gwv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	r.Spec.ParentRefs = parents
	for _, h := range hostnames {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Status.Parents = status
	return r
}

func parentStatus(ref gwv1.ParentReference, cs ...metav1.Condition) gwv1.RouteParentStatus {
	return gwv1.RouteParentStatus{ParentRef: ref, ControllerName: "outrigger.dev/sim", Conditions: cs}
}

func TestGatewayRoutes(t *testing.T) {
	web := gwv1.ParentReference{Name: "web"}
	webHTTP := gwv1.ParentReference{Name: "web", SectionName: ptr.To(gwv1.SectionName("http"))}
	fromOther := gwv1.ParentReference{Name: "web", Namespace: ptr.To(gwv1.Namespace("default"))}
	otherGW := gwv1.ParentReference{Name: "api"}
	service := gwv1.ParentReference{Name: "web", Kind: ptr.To(gwv1.Kind("Service")), Group: ptr.To(gwv1.Group(""))}
	resolved := gwCondition("ResolvedRefs", "True", "ResolvedRefs", "")
	routeAccepted := gwCondition("Accepted", "True", "Accepted", "")

	routes := httpRoutesIn([]*gwv1.HTTPRoute{
		httpRoute("default", "ok", []string{"shop.example.com"}, []gwv1.ParentReference{web}, parentStatus(web, routeAccepted, resolved)),
		// Two references to the same Gateway: a row each, the status of
		// each its own.
		httpRoute("default", "two", nil, []gwv1.ParentReference{webHTTP, otherGW}, parentStatus(otherGW, routeAccepted, resolved),
			parentStatus(webHTTP, gwCondition("Accepted", "False", "NotAllowedByListeners", "listener http allows only Same namespace"))),
		httpRoute("team", "refs", nil, []gwv1.ParentReference{fromOther}, parentStatus(fromOther, routeAccepted,
			gwCondition("ResolvedRefs", "False", "RefNotPermitted", "backend default/db needs a ReferenceGrant"))),
		httpRoute("default", "new", nil, []gwv1.ParentReference{web}),
		// A Service parent (GAMMA) is not the Gateway of the same name.
		httpRoute("default", "mesh", nil, []gwv1.ParentReference{service}),
	})
	routes = append(routes, grpcRoutesIn([]*gwv1.GRPCRoute{grpcRoute("default", "rpc", []string{"rpc.example.com"}, []gwv1.ParentReference{webHTTP},
		parentStatus(webHTTP, routeAccepted, resolved))})...)
	routes = append(routes, tcpRoutesIn([]*gwv1.TCPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: gwv1.TCPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{web}}}}})...)
	routes = append(routes, udpRoutesIn([]*gwv1.UDPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"},
		Spec: gwv1.UDPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{otherGW}}}}})...)

	s := build(inputs{gateways: gatewayInputs{
		classes:  []*gwv1.GatewayClass{gatewayClass("c", "outrigger.dev/sim")},
		gateways: []*gwv1.Gateway{testGateway("web", "c"), testGateway("api", "c")},
		routes:   routes,
	}})
	byName := map[string]Gateway{}
	for _, g := range s.Gateways {
		byName[g.Name] = g
	}
	// Not accepted first, then by kind, namespace and name.
	want := []string{
		"HTTPRoute default/new Pending NoParentStatus",
		"HTTPRoute default/two@http NotAccepted NotAllowedByListeners listener http allows only Same namespace",
		"HTTPRoute team/refs Unresolved RefNotPermitted backend default/db needs a ReferenceGrant",
		"TCPRoute default/db Pending NoParentStatus",
		"GRPCRoute default/rpc@http Accepted  [rpc.example.com]",
		"HTTPRoute default/ok Accepted  [shop.example.com]",
	}
	got := []string{}
	for _, r := range byName["web"].Routes {
		line := fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
		if r.Section != "" {
			line += "@" + r.Section
		}
		line += " " + r.State + " " + r.Reason
		if r.State != "Pending" && r.Message != "" {
			line += " " + r.Message
		}
		if len(r.Hostnames) > 0 {
			line += fmt.Sprint(" ", r.Hostnames)
		}
		got = append(got, line)
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("web's routes:\n got %q\nwant %q", got, want)
	}
	if byName["web"].RoutesTotal != 6 {
		t.Errorf("web has %d routes, want 6", byName["web"].RoutesTotal)
	}
	if api := byName["api"]; api.RoutesTotal != 2 || api.Routes[0].Name != "dns" || api.Routes[1].Name != "two" || api.Routes[1].State != "Accepted" {
		t.Errorf("api's routes: %+v", api.Routes)
	}
}

// TestGatewayRouteKinds: a route of each kind the console reads is listed
// under the Gateway it names, with its hostnames (the kinds that have
// them) and the conditions its status has for that Gateway, and not under
// another Gateway.
func TestGatewayRouteKinds(t *testing.T) {
	web := gwv1.ParentReference{Name: "web", SectionName: ptr.To(gwv1.SectionName("http"))}
	notAllowed := gwCondition("Accepted", "False", "NotAllowedByListeners", "no listener allows this kind")
	routeAccepted := gwCondition("Accepted", "True", "Accepted", "")
	cases := []struct {
		kind          string
		routes        []routeIn
		wantHostnames []string
		wantState     string
		wantReason    string
	}{
		{kind: "HTTPRoute", routes: httpRoutesIn([]*gwv1.HTTPRoute{httpRoute("team", "r", []string{"a.example.com", "b.example.com"},
			[]gwv1.ParentReference{web}, parentStatus(web, routeAccepted))}),
			wantHostnames: []string{"a.example.com", "b.example.com"}, wantState: "Accepted"},
		{kind: "GRPCRoute", routes: grpcRoutesIn([]*gwv1.GRPCRoute{grpcRoute("team", "r", []string{"rpc.example.com"},
			[]gwv1.ParentReference{web}, parentStatus(web, routeAccepted))}),
			wantHostnames: []string{"rpc.example.com"}, wantState: "Accepted"},
		{kind: "GRPCRoute", routes: grpcRoutesIn([]*gwv1.GRPCRoute{grpcRoute("team", "r", nil,
			[]gwv1.ParentReference{web}, parentStatus(web, notAllowed))}),
			wantState: "NotAccepted", wantReason: "NotAllowedByListeners"},
		{kind: "GRPCRoute", routes: grpcRoutesIn([]*gwv1.GRPCRoute{grpcRoute("team", "r", nil, []gwv1.ParentReference{web})}),
			wantState: "Pending", wantReason: "NoParentStatus"},
		{kind: "TCPRoute", routes: tcpRoutesIn([]*gwv1.TCPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
			Spec:   gwv1.TCPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{web}}},
			Status: gwv1.TCPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{parentStatus(web, notAllowed)}}}}}),
			wantState: "NotAccepted", wantReason: "NotAllowedByListeners"},
		{kind: "UDPRoute", routes: udpRoutesIn([]*gwv1.UDPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
			Spec:   gwv1.UDPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{web}}},
			Status: gwv1.UDPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{parentStatus(web, routeAccepted)}}}}}),
			wantState: "Accepted"},
		{kind: "TLSRoute", routes: tlsRoutesIn([]*gwv1.TLSRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
			Spec: gwv1.TLSRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{web}},
				Hostnames: []gwv1.Hostname{"tls.example.com"}},
			Status: gwv1.TLSRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{parentStatus(web, routeAccepted)}}}}}),
			wantHostnames: []string{"tls.example.com"}, wantState: "Accepted"},
	}
	for _, tc := range cases {
		t.Run(tc.kind+" "+tc.wantState, func(t *testing.T) {
			gw := func(name string) *gwv1.Gateway {
				g := testGateway(name, "c")
				g.Namespace = "team"
				return g
			}
			s := build(inputs{gateways: gatewayInputs{
				classes:  []*gwv1.GatewayClass{gatewayClass("c", "outrigger.dev/sim")},
				gateways: []*gwv1.Gateway{gw("api"), gw("web")},
				routes:   tc.routes,
			}})
			if len(s.Gateways) != 2 || s.Gateways[0].Name != "api" || s.Gateways[1].Name != "web" {
				t.Fatalf("gateways %+v", s.Gateways)
			}
			if api := s.Gateways[0]; api.RoutesTotal != 0 || len(api.Routes) != 0 {
				t.Errorf("api has routes: %+v", api.Routes)
			}
			g := s.Gateways[1]
			if g.RoutesTotal != 1 || len(g.Routes) != 1 {
				t.Fatalf("web's routes: %d, %+v", g.RoutesTotal, g.Routes)
			}
			r := g.Routes[0]
			if r.Kind != tc.kind || r.Namespace != "team" || r.Name != "r" || r.Section != "http" {
				t.Errorf("route %s %s/%s@%s, want %s team/r@http", r.Kind, r.Namespace, r.Name, r.Section, tc.kind)
			}
			if fmt.Sprint(r.Hostnames) != fmt.Sprint(tc.wantHostnames) {
				t.Errorf("hostnames %v, want %v", r.Hostnames, tc.wantHostnames)
			}
			if r.State != tc.wantState || r.Reason != tc.wantReason {
				t.Errorf("state %s/%s, want %s/%s", r.State, r.Reason, tc.wantState, tc.wantReason)
			}
			// The status's one condition for this Gateway, none without one.
			wantConditions := 1
			if tc.wantReason == "NoParentStatus" {
				wantConditions = 0
			}
			if len(r.Conditions) != wantConditions {
				t.Errorf("conditions %+v, want %d", r.Conditions, wantConditions)
			}
		})
	}
}

func TestGatewayRoutesBounded(t *testing.T) {
	var routes []*gwv1.HTTPRoute
	for i := range maxRoutesListed + 10 {
		routes = append(routes, httpRoute("default", fmt.Sprintf("r-%03d", i), nil, []gwv1.ParentReference{{Name: "web"}}))
	}
	s := build(inputs{gateways: gatewayInputs{classes: []*gwv1.GatewayClass{gatewayClass("c", "x")}, gateways: []*gwv1.Gateway{testGateway("web", "c")}, routes: httpRoutesIn(routes)}})
	if g := s.Gateways[0]; len(g.Routes) != maxRoutesListed || g.RoutesTotal != maxRoutesListed+10 {
		t.Errorf("%d routes listed of %d", len(g.Routes), g.RoutesTotal)
	}
}

func TestGatewayView(t *testing.T) {
	cls := []*gwv1.GatewayClass{gatewayClass("ours", "outrigger.dev/sim"), gatewayClass("theirs", "example.com/gw")}
	gws := []*gwv1.Gateway{
		testGateway("web", "ours", withGatewayConditions(accepted, programmed), withAddress("198.18.0.7")),
		testGateway("api", "ours", withGatewayConditions(accepted, gwCondition("Programmed", "False", "AddressNotAssigned", "quota exceeded"))),
		testGateway("edge", "theirs", withGatewayConditions(accepted, programmed)),
	}
	for i := range maxRows + 5 {
		gws = append(gws, testGateway(fmt.Sprintf("bulk-%03d", i), "theirs"))
	}
	cases := []struct {
		filter string
		want   []string
		count  Count
	}{
		{filter: "198.18.0.7", want: []string{"web"}, count: Count{Total: maxRows + 8, Ready: 2, Matching: 1}},
		{filter: "quota", want: []string{"api"}, count: Count{Total: maxRows + 8, Ready: 2, Matching: 1}},
		{filter: "example.com/gw", count: Count{Total: maxRows + 8, Ready: 2, Matching: maxRows + 6}},
		{filter: "default/edge", want: []string{"edge"}, count: Count{Total: maxRows + 8, Ready: 2, Matching: 1}},
		{filter: "", count: Count{Total: maxRows + 8, Ready: 2, Matching: maxRows + 8}},
	}
	for _, tc := range cases {
		t.Run(tc.filter, func(t *testing.T) {
			s := build(inputs{gateways: gatewayInputs{classes: cls, gateways: gws}, view: View{Gateways: tc.filter}})
			if s.GatewayCount != tc.count {
				t.Errorf("count %+v, want %+v", s.GatewayCount, tc.count)
			}
			if len(s.Gateways) != min(tc.count.Matching, maxRows) {
				t.Errorf("%d rows, want %d", len(s.Gateways), min(tc.count.Matching, maxRows))
			}
			if tc.want != nil {
				var got []string
				for _, g := range s.Gateways {
					got = append(got, g.Name)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Errorf("rows %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestGatewayLoadBalancer: the Service Outrigger made for a Gateway is
// named on its row, found by the Gateway's UID.
func TestGatewayLoadBalancer(t *testing.T) {
	gw := testGateway("web", "c")
	svc := lbService("default-web-1234", func(s *corev1.Service) {
		s.Namespace = "outrigger-gateways"
		s.Labels = map[string]string{gateway.GatewayUIDLabel: string(gw.UID), gateway.GatewayLabel: "web"}
	})
	stale := lbService("default-web-0000", func(s *corev1.Service) {
		s.Namespace = "outrigger-gateways"
		s.Labels = map[string]string{gateway.GatewayUIDLabel: "an-earlier-web", gateway.GatewayLabel: "web"}
	})
	s := build(inputs{services: []*corev1.Service{stale, svc}, gateways: gatewayInputs{classes: []*gwv1.GatewayClass{gatewayClass("c", "outrigger.dev/sim")}, gateways: []*gwv1.Gateway{gw}}})
	if got := s.Gateways[0].LoadBalancer; got != "outrigger-gateways/default-web-1234" {
		t.Errorf("load balancer %q", got)
	}
}
