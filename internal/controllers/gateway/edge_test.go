package gateway

import (
	"net"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// Tests of input a tenant controls that must cost only itself (issue 59):
// what compile refuses, and that it programs nothing of it.

// parentCondition is the condition typ of the one parent status compile
// gave the route kind namespace/name.
func parentCondition(t *testing.T, res *result, kind, namespace, name, typ string) metav1.Condition {
	t.Helper()
	parents := res.routeParents[routeKey{kind: kind, name: types.NamespacedName{Namespace: namespace, Name: name}}]
	if len(parents) != 1 {
		t.Fatalf("%s %s/%s has %d parent statuses, want 1", kind, namespace, name, len(parents))
	}
	for _, c := range parents[0].Conditions {
		if c.Type == typ {
			return c
		}
	}
	t.Fatalf("%s %s/%s has no %s condition", kind, namespace, name, typ)
	return metav1.Condition{}
}

// allBackends are every backend of every port, rule and virtual host.
func allBackends(cfg dataplane.Config) []dataplane.Backend {
	var out []dataplane.Backend
	for _, p := range cfg.Ports {
		out = append(out, p.Backends...)
		for _, h := range p.Hosts {
			for _, r := range h.Rules {
				out = append(out, r.Backends...)
			}
		}
	}
	return out
}

// TestExternalNameServiceIsNoBackend: an ExternalName Service named by a
// backendRef is refused, as Gateway API asks (CVE-2021-25740): the route
// gets ResolvedRefs=False, reason UnsupportedValue, and no backend reaches
// the name it points to; the route's other backends are served.
func TestExternalNameServiceIsNoBackend(t *testing.T) {
	w := worldOf(t, t.Name(), []byte(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {namespace: edge, name: gw}
spec:
  gatewayClassName: outrigger
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: tcp, port: 9000, protocol: TCP}
---
apiVersion: v1
kind: Service
metadata: {namespace: edge, name: metadata}
spec:
  type: ExternalName
  externalName: metadata.internal.example
  ports: [{port: 80, protocol: TCP}, {port: 9000, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {namespace: edge, name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: web}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  rules:
  - backendRefs: [{name: metadata, port: 80}, {name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {namespace: edge, name: tcp}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: metadata, port: 9000}]}]
`))
	res := compile(w)
	for _, rt := range []struct{ kind, name string }{{kindHTTPRoute, "web"}, {kindTCPRoute, "tcp"}} {
		c := parentCondition(t, res, rt.kind, "edge", rt.name, string(gwv1.RouteConditionResolvedRefs))
		if c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, "ExternalName") {
			t.Errorf("%s %s: ResolvedRefs %s %s %q, want False UnsupportedValue naming ExternalName", rt.kind, rt.name, c.Status, c.Reason, c.Message)
		}
	}
	served := 0
	for _, b := range allBackends(res.config) {
		if b.Service != nil && b.Service.Name == "metadata" || strings.Contains(b.Address, "metadata") {
			t.Errorf("backend %+v reaches the ExternalName Service", b)
		}
		if !b.Invalid && b.Address == "198.18.0.10:80" {
			served++
		}
	}
	if served != 1 {
		t.Errorf("the route's other backend is served %d times, want once", served)
	}
}

// TestInvalidRegexCostsOnlyItsRoute: a route with a regular expression
// the data plane's Go regexp rejects (in a query parameter, a header, a
// path, a GRPCRoute method) is not accepted (reason UnsupportedValue, the
// message naming it) and nothing of it is programmed; the data plane
// takes the configuration, and the Gateway's other route serves.
func TestInvalidRegexCostsOnlyItsRoute(t *testing.T) {
	w := worldOf(t, t.Name(), []byte(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {namespace: edge, name: gw}
spec:
  gatewayClassName: outrigger
  listeners:
  - {name: http, port: 80, protocol: HTTP}
---
apiVersion: v1
kind: Service
metadata: {namespace: edge, name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: bad-query, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /fine}}]
    backendRefs: [{name: web, port: 80}]
  - matches: [{queryParams: [{type: RegularExpression, name: q, value: "(["}]}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: bad-header, creationTimestamp: "2026-01-01T00:00:01Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{headers: [{type: RegularExpression, name: x-id, value: "a**"}]}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: bad-path, creationTimestamp: "2026-01-01T00:00:02Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: RegularExpression, value: "/a(?<x"}}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {namespace: edge, name: bad-method, creationTimestamp: "2026-01-01T00:00:03Z"}
spec:
  parentRefs: [{name: gw}]
  hostnames: [grpc.example.com]
  rules:
  - matches: [{method: {type: RegularExpression, service: "pkg(", method: Get}}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: edge, name: good, creationTimestamp: "2026-01-01T00:00:04Z"}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /good}, queryParams: [{type: RegularExpression, name: q, value: "^a+$"}]}]
    backendRefs: [{name: web, port: 80}]
`))
	res := compile(w)
	for _, bad := range []struct{ kind, name, regex string }{
		{kindHTTPRoute, "bad-query", `"(["`},
		{kindHTTPRoute, "bad-header", `"a**"`},
		{kindHTTPRoute, "bad-path", `"/a(?<x"`},
		{kindGRPCRoute, "bad-method", `pkg(`},
	} {
		c := parentCondition(t, res, bad.kind, "edge", bad.name, string(gwv1.RouteConditionAccepted))
		if c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.RouteReasonUnsupportedValue) || !strings.Contains(c.Message, bad.regex) {
			t.Errorf("%s %s: Accepted %s %s %q, want False UnsupportedValue naming %s", bad.kind, bad.name, c.Status, c.Reason, c.Message, bad.regex)
		}
	}
	if c := parentCondition(t, res, kindHTTPRoute, "edge", "good", string(gwv1.RouteConditionAccepted)); c.Status != metav1.ConditionTrue {
		t.Errorf("route good: Accepted %s %s %q, want True", c.Status, c.Reason, c.Message)
	}
	var routes []string
	for _, p := range res.config.Ports {
		for _, h := range p.Hosts {
			for _, r := range h.Rules {
				routes = append(routes, r.Route)
			}
		}
	}
	if len(routes) != 1 || routes[0] != "edge/good" {
		t.Errorf("programmed rules of routes %q, want edge/good's only", routes)
	}
	if got := res.listeners[0].AttachedRoutes; got != 1 {
		t.Errorf("listener has %d routes attached, want 1", got)
	}

	// The data plane takes what was compiled.
	proxy := dataplane.New(dataplane.Options{
		ListenTCP: func(int32) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
		Log:       testr.New(t),
	})
	defer proxy.Close()
	if err := proxy.Apply(&res.config); err != nil {
		t.Errorf("the data plane refused the configuration: %v", err)
	}
}

// A backendRef's filter the data plane does not apply per backend (it
// applies the header modifiers and mirrors) refuses its rule rather than
// being dropped.
func TestBackendRefFiltersServedOrRefused(t *testing.T) {
	for typ, ok := range map[gwv1.HTTPRouteFilterType]bool{
		gwv1.HTTPRouteFilterRequestHeaderModifier:  true,
		gwv1.HTTPRouteFilterResponseHeaderModifier: true,
		gwv1.HTTPRouteFilterRequestRedirect:        false,
		gwv1.HTTPRouteFilterURLRewrite:             false,
		gwv1.HTTPRouteFilterRequestMirror:          true,
		gwv1.HTTPRouteFilterCORS:                   false,
	} {
		rule := gwv1.HTTPRouteRule{BackendRefs: []gwv1.HTTPBackendRef{{Filters: []gwv1.HTTPRouteFilter{{Type: typ}}}}}
		if got := validRule(rule) == ""; got != ok {
			t.Errorf("filter %s on a backendRef: served %v, want %v (%q)", typ, got, ok, validRule(rule))
		}
	}
}

// The experimental channel's rule fields: a retry stanza is served when the
// data plane can parse it and refuses its route otherwise (it costs only
// itself); sessionPersistence, which the data plane does not serve, is
// refused rather than accepted and ignored.
func TestExperimentalRuleFieldsServedOrRefused(t *testing.T) {
	ok := []gwv1.HTTPRouteRule{{Retry: &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{500}, Attempts: ptr.To(3), Backoff: ptr.To(gwv1.Duration("100ms"))}}}
	if msg := invalidValue(ok); msg != "" {
		t.Errorf("a valid retry stanza refused: %s", msg)
	}
	tooMany := []gwv1.HTTPRouteRule{{}, {Retry: &gwv1.HTTPRouteRetry{Attempts: ptr.To(1000)}}}
	if msg := invalidValue(tooMany); !strings.Contains(msg, "rule 1") || !strings.Contains(msg, "at most") {
		t.Errorf("1000 retry attempts: %q, want rule 1 refused with the limit", msg)
	}
	if msg := validRule(gwv1.HTTPRouteRule{SessionPersistence: &gwv1.SessionPersistence{}}); msg == "" {
		t.Error("sessionPersistence accepted, though nothing serves it")
	}
}
