package gateway

import (
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// fuzzWorld is the world each fuzzed route joins: a Gateway with an HTTP
// listener, a well-behaved route that must keep serving, and the backend.
const fuzzWorld = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {namespace: edge, name: gw, generation: 1}
spec:
  gatewayClassName: outrigger
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: v1
kind: Service
metadata: {namespace: tenant, name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: tenant, name: good, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  parentRefs: [{namespace: edge, name: gw}]
  hostnames: [good.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {namespace: tenant, name: fuzzed, creationTimestamp: "2026-01-01T00:00:01Z"}
spec:
  parentRefs: [{namespace: edge, name: gw}]
  rules:
  - backendRefs: [{name: web, port: 80}]
`

// FuzzCompile gives a tenant's route hostile values in every field a
// regular expression, a path, a header or a CORS origin reaches, and holds compile to
// what a shared Gateway relies on: no panic; whatever it programs, the
// data plane's own code applies (a programming the pods refuse would
// freeze every route of the Gateway); and the well-behaved route is
// programmed whatever the other holds.
func FuzzCompile(f *testing.F) {
	f.Add("fuzz.example.com", uint8(0), "/a", "X-Id", "[0-9", uint8(1), "id", "(", uint8(1), "GET", "/b", "X-Add", "v", "https://*.example.com")
	f.Add("*.example.com", uint8(2), "/a/(", "x", "v", uint8(0), "q", "v", uint8(0), "", "", "", "", "https://example.com:0")
	f.Add("q.example.com", uint8(0), "/", "", "", uint8(0), "id", "(", uint8(1), "", "", "", "", "")
	f.Add("", uint8(1), "/../admin", "", "", uint8(0), "", "", uint8(0), "PATCH", "/%2F", "bad header", "\n", "null")
	f.Fuzz(func(t *testing.T, host string, pathType uint8, path, header, headerValue string, headerRegex uint8,
		query, queryValue string, queryRegex uint8, method, rewrite, addName, addValue, origin string) {
		w := worldOf(t, "fuzz", []byte(fuzzWorld))
		var r *gwv1.HTTPRoute
		for _, rt := range w.routes {
			if h, ok := rt.obj.(*gwv1.HTTPRoute); ok && h.Name == "fuzzed" {
				r = h
			}
		}
		if r == nil {
			t.Fatal("the fuzzed route is not in the world")
		}
		if host != "" {
			r.Spec.Hostnames = []gwv1.Hostname{gwv1.Hostname(host)}
		}
		types := []gwv1.PathMatchType{gwv1.PathMatchPathPrefix, gwv1.PathMatchExact, gwv1.PathMatchRegularExpression}
		m := gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &types[int(pathType)%len(types)], Value: &path}}
		matchType := func(regex uint8) *gwv1.HeaderMatchType {
			t := gwv1.HeaderMatchExact
			if regex%2 == 1 {
				t = gwv1.HeaderMatchRegularExpression
			}
			return &t
		}
		if header != "" {
			m.Headers = []gwv1.HTTPHeaderMatch{{Type: matchType(headerRegex), Name: gwv1.HTTPHeaderName(header), Value: headerValue}}
		}
		if query != "" {
			qt := gwv1.QueryParamMatchType(*matchType(queryRegex))
			m.QueryParams = []gwv1.HTTPQueryParamMatch{{Type: &qt, Name: gwv1.HTTPHeaderName(query), Value: queryValue}}
		}
		if method != "" {
			mm := gwv1.HTTPMethod(method)
			m.Method = &mm
		}
		rule := &r.Spec.Rules[0]
		rule.Matches = []gwv1.HTTPRouteMatch{m}
		if rewrite != "" {
			rule.Filters = append(rule.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterURLRewrite,
				URLRewrite: &gwv1.HTTPURLRewriteFilter{Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &rewrite}}})
		}
		if addName != "" {
			rule.Filters = append(rule.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Add: []gwv1.HTTPHeader{{Name: gwv1.HTTPHeaderName(addName), Value: addValue}}}})
		}

		if origin != "" {
			rule.Filters = append(rule.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterCORS,
				CORS: &gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{gwv1.CORSOrigin(origin)}, AllowHeaders: []gwv1.HTTPHeaderName{gwv1.HTTPHeaderName(addName)}}})
		}

		res := compile(w)
		if err := dataplane.Check(&res.config); err != nil {
			t.Fatalf("compile programmed what the data plane refuses: %v", err)
		}
		served := false
		for _, p := range res.config.Ports {
			for _, h := range p.Hosts {
				for _, ru := range h.Rules {
					served = served || ru.Route == "tenant/good"
				}
			}
		}
		if !served {
			t.Fatalf("the well-behaved route is not programmed beside the fuzzed one: %+v", res.config.Ports)
		}
	})
}
