package gateway

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
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
	checkOrder(t, entries, "exact", "long prefix", "short prefix", "method", "headers", "old catch-all", "young catch-all")
}

// checkOrder sorts entries by precedence and compares their rules' Route.
func checkOrder(t *testing.T, entries []ruleEntry, want ...string) {
	t.Helper()
	slices.SortStableFunc(entries, precedence)
	var got []string
	for _, e := range entries {
		got = append(got, e.rule.Route)
	}
	if !slices.Equal(got, want) {
		t.Errorf("order %q, want %q", got, want)
	}
}

// TestCompileListeners covers the listener conditions of bad input: an
// unsupported protocol, two listeners in conflict, a certificate missing
// (HTTPS, and TLS whose mode is Terminate by default);
// the other listeners stay valid and programmed.
func TestCompileListeners(t *testing.T) {
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 3},
		Spec: gwv1.GatewaySpec{Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "quic", Port: 8443, Protocol: "example.com/QUIC"},
			{Name: "tls", Port: 8444, Protocol: gwv1.TLSProtocolType},
			{Name: "tcp-on-80", Port: 80, Protocol: gwv1.TCPProtocolType},
			{Name: "http-again", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "missing"}}}},
			{Name: "udp", Port: 53, Protocol: gwv1.UDPProtocolType},
			{Name: "tcp", Port: 53, Protocol: gwv1.TCPProtocolType},
		}},
	}
	res := compile(&world{kinds: servedKinds(true, true), gateway: gw, services: map[types.NamespacedName]*corev1.Service{}, secrets: map[types.NamespacedName]*corev1.Secret{}})
	want := map[string]struct {
		condition, reason string
		programmed        bool
	}{
		"http":       {string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonProgrammed), true},
		"quic":       {string(gwv1.ListenerConditionAccepted), string(gwv1.ListenerReasonUnsupportedProtocol), false},
		"tls":        {string(gwv1.ListenerConditionResolvedRefs), string(gwv1.ListenerReasonInvalidCertificateRef), false},
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

// TestMethodPath turns GRPCRoute method matches into the paths of the
// calls they take.
func TestMethodPath(t *testing.T) {
	exactType, reType := gwv1.GRPCMethodMatchExact, gwv1.GRPCMethodMatchRegularExpression
	for _, tc := range []struct {
		name  string
		match *gwv1.GRPCMethodMatch
		want  *gwv1.HTTPPathMatch
	}{
		{"none", nil, nil},
		{"service and method", &gwv1.GRPCMethodMatch{Service: ptr.To("pkg.Svc"), Method: ptr.To("Get")},
			&gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchExact), Value: ptr.To("/pkg.Svc/Get")}},
		{"service", &gwv1.GRPCMethodMatch{Type: &exactType, Service: ptr.To("pkg.Svc")},
			&gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/pkg.Svc")}},
		{"method", &gwv1.GRPCMethodMatch{Method: ptr.To("Get.")},
			&gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To(`/(?:[^/]+)/(?:Get\.)`)}},
		{"regular expressions", &gwv1.GRPCMethodMatch{Type: &reType, Service: ptr.To("pkg\\.(A|B)"), Method: ptr.To("Get|List")},
			&gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To(`/(?:pkg\.(A|B))/(?:Get|List)`)}},
		{"regular expression, service only", &gwv1.GRPCMethodMatch{Type: &reType, Service: ptr.To("pkg\\..*")},
			&gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To(`/(?:pkg\..*)/(?:[^/]+)`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := methodPath(tc.match)
			if (got == nil) != (tc.want == nil) || (got != nil && (*got.Type != *tc.want.Type || *got.Value != *tc.want.Value)) {
				t.Errorf("methodPath = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestGRPCPrecedence orders GRPCRoute matches as the specification says:
// longest service, longest method, most headers, oldest route.
func TestGRPCPrecedence(t *testing.T) {
	old, young := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	entry := func(name string, service, method, headers int, created metav1.Time) ruleEntry {
		e := ruleEntry{rule: dataplane.Rule{Route: name, GRPC: true}, created: created, route: "ns/" + name, grpc: &grpcRank{service, method}}
		for range headers {
			e.rule.Match.Headers = append(e.rule.Match.Headers, gwv1.HTTPHeaderMatch{Name: "h", Value: "v"})
		}
		return e
	}
	entries := []ruleEntry{
		entry("young any", 0, 0, 0, young),
		entry("headers", 0, 0, 2, young),
		entry("old any", 0, 0, 0, old),
		entry("method only", 0, 6, 0, young),
		entry("service", 7, 0, 0, young),
		entry("service and method", 7, 3, 0, young),
		entry("longer service", 9, 0, 0, young),
	}
	checkOrder(t, entries, "longer service", "service and method", "service", "method only", "headers", "old any", "young any")
}

// TestCompileGRPCRoute attaches GRPCRoutes to HTTP listeners as HTTPRoutes
// are, with the route parent conditions of each case, and programs their
// rules for h2c backends.
func TestCompileGRPCRoute(t *testing.T) {
	old, young := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 1},
		Spec: gwv1.GatewaySpec{Listeners: []gwv1.Listener{
			{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
			{Name: "http-only", Port: 8080, Protocol: gwv1.HTTPProtocolType, AllowedRoutes: &gwv1.AllowedRoutes{
				Kinds: []gwv1.RouteGroupKind{{Kind: kindHTTPRoute}},
			}},
		}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "grpc"},
		Spec:       corev1.ServiceSpec{ClusterIP: "198.18.0.10", Ports: []corev1.ServicePort{{Port: 8080, Protocol: corev1.ProtocolTCP}}},
	}
	other := svc.DeepCopy()
	other.Namespace = "other"
	parent := func(section string) []gwv1.ParentReference {
		ref := gwv1.ParentReference{Name: "gw"}
		if section != "" {
			ref.SectionName = ptr.To(gwv1.SectionName(section))
		}
		return []gwv1.ParentReference{ref}
	}
	grpcRoute := func(name string, created metav1.Time, section string, hostnames []gwv1.Hostname, rule gwv1.GRPCRouteRule) *gwv1.GRPCRoute {
		return &gwv1.GRPCRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: created},
			Spec: gwv1.GRPCRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: parent(section)},
				Hostnames:       hostnames,
				Rules:           []gwv1.GRPCRouteRule{rule},
			},
		}
	}
	backend := func(ns string) []gwv1.GRPCBackendRef {
		ref := gwv1.GRPCBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "grpc", Port: ptr.To[gwv1.PortNumber](8080)}}}
		if ns != "" {
			ref.Namespace = ptr.To(gwv1.Namespace(ns))
		}
		return []gwv1.GRPCBackendRef{ref}
	}
	method := []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: ptr.To("pkg.Svc"), Method: ptr.To("Get")}}}
	w := &world{
		kinds:   servedKinds(true, true),
		gateway: gw,
		routes: routesOf(
			&gwv1.HTTPRoute{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "younger-http", CreationTimestamp: young},
				Spec:       gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: parent("http")}},
			},
			&gwv1.HTTPRoute{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-host", CreationTimestamp: young},
				Spec:       gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: parent("http")}, Hostnames: []gwv1.Hostname{"web.example.com"}},
			},
			grpcRoute("served", old, "http", []gwv1.Hostname{"grpc.example.com"}, gwv1.GRPCRouteRule{Matches: method, BackendRefs: backend("")}),
			grpcRoute("not-permitted", old, "http", []gwv1.Hostname{"grpc.example.com"}, gwv1.GRPCRouteRule{BackendRefs: backend("other")}),
			grpcRoute("extension", old, "http", []gwv1.Hostname{"grpc.example.com"}, gwv1.GRPCRouteRule{BackendRefs: backend(""), Filters: []gwv1.GRPCRouteFilter{{Type: gwv1.GRPCRouteFilterExtensionRef}}}),
			grpcRoute("http-only", old, "http-only", nil, gwv1.GRPCRouteRule{BackendRefs: backend("")}),
		),
		services: map[types.NamespacedName]*corev1.Service{{Namespace: "ns", Name: "grpc"}: svc, {Namespace: "other", Name: "grpc"}: other},
		secrets:  map[types.NamespacedName]*corev1.Secret{},
	}
	res := compile(w)

	for _, tc := range []struct {
		kind, name               string
		accepted, resolvedReason string
	}{
		{kindGRPCRoute, "served", string(gwv1.RouteReasonAccepted), string(gwv1.RouteReasonResolvedRefs)},
		{kindGRPCRoute, "not-permitted", string(gwv1.RouteReasonAccepted), string(gwv1.RouteReasonRefNotPermitted)},
		{kindGRPCRoute, "extension", string(gwv1.RouteReasonAccepted), string(gwv1.RouteReasonUnsupportedValue)},
		{kindGRPCRoute, "http-only", string(gwv1.RouteReasonNotAllowedByListeners), string(gwv1.RouteReasonResolvedRefs)},
		// Its any-host meets the older GRPCRoutes' grpc.example.com.
		{kindHTTPRoute, "younger-http", string(gwv1.RouteReasonNotAllowedByListeners), string(gwv1.RouteReasonResolvedRefs)},
		{kindHTTPRoute, "other-host", string(gwv1.RouteReasonAccepted), string(gwv1.RouteReasonResolvedRefs)},
	} {
		t.Run(tc.kind+" "+tc.name, func(t *testing.T) {
			parents := res.routeParents[routeKey{kind: tc.kind, name: types.NamespacedName{Namespace: "ns", Name: tc.name}}]
			if len(parents) != 1 {
				t.Fatalf("%d parent statuses, want 1", len(parents))
			}
			for _, c := range parents[0].Conditions {
				want := map[string]string{string(gwv1.RouteConditionAccepted): tc.accepted, string(gwv1.RouteConditionResolvedRefs): tc.resolvedReason}[c.Type]
				if c.Reason != want {
					t.Errorf("%s reason %s (%s), want %s", c.Type, c.Reason, c.Message, want)
				}
			}
		})
	}

	if kinds := res.listeners[0].SupportedKinds; len(kinds) != 2 || kinds[1].Kind != kindGRPCRoute {
		t.Errorf("HTTP listener supports %v, want HTTPRoute and GRPCRoute", kinds)
	}
	if got := res.listeners[0].AttachedRoutes; got != 4 {
		t.Errorf("HTTP listener has %d routes attached, want 4 (three GRPCRoutes, one HTTPRoute)", got)
	}
	var vh *dataplane.VirtualHost
	for i, h := range res.config.Ports[0].Hosts {
		if h.Hostname == "grpc.example.com" {
			vh = &res.config.Ports[0].Hosts[i]
		}
	}
	if vh == nil || len(vh.Rules) != 3 {
		t.Fatalf("virtual host grpc.example.com = %+v, want 3 rules", vh)
	}
	first := vh.Rules[0]
	if first.Route != "ns/served" || !first.GRPC || *first.Match.Path.Value != "/pkg.Svc/Get" ||
		len(first.Backends) != 1 || !first.Backends[0].H2C || first.Backends[0].Address != "198.18.0.10:8080" {
		t.Errorf("first rule %+v, want ns/served's method to an h2c backend", first)
	}

	w.kinds = servedKinds(false, false)
	if kinds := compile(w).listeners[0].SupportedKinds; len(kinds) != 1 || kinds[0].Kind != kindHTTPRoute {
		t.Errorf("without GRPCRoute served, HTTP listener supports %v, want HTTPRoute only", kinds)
	}
}

// routesOf are route objects as the world holds them, each with its kind
// from routeKindTable.
func routesOf(objs ...client.Object) []route {
	out := make([]route, 0, len(objs))
	for _, o := range objs {
		i := slices.IndexFunc(routeKindTable, func(k *routeKind) bool { return reflect.TypeOf(k.object()) == reflect.TypeOf(o) })
		if i < 0 {
			panic(fmt.Sprintf("%T is no route kind served", o))
		}
		out = append(out, route{kind: routeKindTable[i], obj: o})
	}
	return out
}
