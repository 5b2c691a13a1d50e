package gateway

import (
	"regexp"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// h2cAppProtocols are the Service port appProtocols whose backends are
// reached over HTTP/2 in cleartext with prior knowledge.
var h2cAppProtocols = []string{"kubernetes.io/h2c", "grpc"}

// A gRPC call is an HTTP/2 POST to /<service>/<method>: a GRPCRoute rule
// is the HTTPRoute rule matching that path and those headers, with the
// same header filters. The data plane serves both alike.

// httpRule is the HTTPRoute rule a GRPCRoute rule serves as.
func httpRule(rule gwv1.GRPCRouteRule) gwv1.HTTPRouteRule {
	out := gwv1.HTTPRouteRule{Name: rule.Name, Filters: httpFilters(rule.Filters)}
	for _, m := range rule.Matches {
		hm := gwv1.HTTPRouteMatch{Path: methodPath(m.Method)}
		for _, h := range m.Headers {
			hm.Headers = append(hm.Headers, gwv1.HTTPHeaderMatch{
				Type:  (*gwv1.HeaderMatchType)(h.Type),
				Name:  gwv1.HTTPHeaderName(h.Name),
				Value: h.Value,
			})
		}
		out.Matches = append(out.Matches, hm)
	}
	for _, br := range rule.BackendRefs {
		out.BackendRefs = append(out.BackendRefs, gwv1.HTTPBackendRef{BackendRef: br.BackendRef, Filters: httpFilters(br.Filters)})
	}
	return out
}

// methodPath is the request path a method match holds for; nil for any.
func methodPath(m *gwv1.GRPCMethodMatch) *gwv1.HTTPPathMatch {
	if m == nil {
		return nil
	}
	service, method := ptr.Deref(m.Service, ""), ptr.Deref(m.Method, "")
	if ptr.Deref(m.Type, gwv1.GRPCMethodMatchExact) == gwv1.GRPCMethodMatchRegularExpression {
		return regexPath(anyIfEmpty(service), anyIfEmpty(method))
	}
	switch {
	case service != "" && method != "":
		return &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchExact), Value: ptr.To("/" + service + "/" + method)}
	case service != "":
		// By path element: /<service>/ and whatever method follows.
		return &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/" + service)}
	case method != "":
		return regexPath("[^/]+", regexp.QuoteMeta(method))
	}
	return nil
}

func anyIfEmpty(re string) string {
	if re == "" {
		return "[^/]+"
	}
	return re
}

func regexPath(service, method string) *gwv1.HTTPPathMatch {
	return &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchRegularExpression), Value: ptr.To("/(?:" + service + ")/(?:" + method + ")")}
}

// httpFilters are GRPCRoute filters as the HTTPRoute filters of the same
// meaning: a RequestMirror mirrors a call as an HTTPRoute's mirrors a
// request (a unary call, its body within the mirror's bound); the type the
// data plane lacks (ExtensionRef) keeps its name and is refused as an
// HTTPRoute's is.
func httpFilters(fs []gwv1.GRPCRouteFilter) []gwv1.HTTPRouteFilter {
	if fs == nil {
		return nil
	}
	out := make([]gwv1.HTTPRouteFilter, 0, len(fs))
	for _, f := range fs {
		out = append(out, gwv1.HTTPRouteFilter{
			Type:                   gwv1.HTTPRouteFilterType(f.Type),
			RequestHeaderModifier:  f.RequestHeaderModifier,
			ResponseHeaderModifier: f.ResponseHeaderModifier,
			RequestMirror:          f.RequestMirror,
			ExtensionRef:           f.ExtensionRef,
		})
	}
	return out
}
