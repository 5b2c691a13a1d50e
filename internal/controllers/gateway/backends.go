package gateway

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// ruleEntry is one match of one HTTPRoute or GRPCRoute rule, with what
// orders it.
type ruleEntry struct {
	rule    dataplane.Rule
	created metav1.Time
	route   string
	index   int
	// grpc is the length of the service and method a GRPCRoute match
	// names, which order GRPCRoute rules; nil for an HTTPRoute's.
	grpc *grpcRank
}

type grpcRank struct{ service, method int }

type resolvedBackends struct {
	http []ruleEntry
	l4   []dataplane.Backend
}

// resolveBackends compiles a route's rules with their backends; the first
// failing reference gives ResolvedRefs' reason.
func resolveBackends(w *world, rt route) (string, string, resolvedBackends) {
	var out resolvedBackends
	var reason, msg string
	fail := func(r gwv1.RouteConditionReason, m string) {
		if reason == "" {
			reason, msg = string(r), m
		}
	}
	resolve := func(ref gwv1.BackendObjectReference, weight *int32, protocol corev1.Protocol) dataplane.Backend {
		b := dataplane.Backend{Weight: 1}
		if weight != nil {
			b.Weight = *weight
		}
		if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != kindService) {
			fail(gwv1.RouteReasonInvalidKind, fmt.Sprintf("backendRef %s is not a Service", ref.Name))
			b.Invalid = true
			return b
		}
		ns := rt.obj.GetNamespace()
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != rt.obj.GetNamespace() && !granted(w.grants, groupGateway, rt.kind.name, rt.obj.GetNamespace(), "", kindService, ns, string(ref.Name)) {
			fail(gwv1.RouteReasonRefNotPermitted, fmt.Sprintf("no ReferenceGrant in %s allows Service %s", ns, ref.Name))
			b.Invalid = true
			return b
		}
		svc, ok := w.services[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if !ok {
			fail(gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s not found", ns, ref.Name))
			b.Invalid = true
			return b
		}
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			// An ExternalName Service is a DNS alias: reaching it would
			// send the Gateway's traffic wherever it points (another
			// namespace's Service without a ReferenceGrant, the node's
			// metadata endpoint). Gateway API asks that it not be
			// supported (CVE-2021-25740).
			fail(gwv1.RouteReasonUnsupportedValue, fmt.Sprintf("Service %s/%s is of type ExternalName, which is not a supported backend", ns, ref.Name))
			b.Invalid = true
			return b
		}
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return ref.Port != nil && p.Port == *ref.Port && p.Protocol == protocol
		})
		if i < 0 {
			fail(gwv1.RouteReasonBackendNotFound, fmt.Sprintf("Service %s/%s has no %s port %v", ns, ref.Name, protocol, portString(ref.Port)))
			b.Invalid = true
			return b
		}
		b.Address = serviceAddress(svc, *ref.Port)
		b.Service = &dataplane.ServicePort{Namespace: ns, Name: string(ref.Name), Port: *ref.Port}
		// gRPC is HTTP/2 only; other backends speak it when their port
		// says so.
		b.H2C = rt.kind.name == kindGRPCRoute || slices.Contains(h2cAppProtocols, ptr.Deref(svc.Spec.Ports[i].AppProtocol, ""))
		// A BackendTLSPolicy has HTTP reach the port over TLS; one that
		// cannot be used fails the backend rather than send it plain.
		if v, ok := w.policies.forBackend(types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, svc.Spec.Ports[i].Name); ok && rt.kind.layer7() {
			b.TLS = v.tls
			b.Invalid = v.tls == nil
		}
		return b
	}
	// l7Rules compiles HTTPRoute rules, and GRPCRoute rules made into
	// them, with their backends.
	l7Rules := func(rules []gwv1.HTTPRouteRule, grpc []gwv1.GRPCRouteRule) {
		name := rt.name()
		for ri, rule := range rules {
			// A mirror that does not resolve is left out (the spec: not
			// configured), and ResolvedRefs says why; the rule serves.
			mirrorsOf := func(fs []gwv1.HTTPRouteFilter) []dataplane.Mirror {
				var out []dataplane.Mirror
				for _, f := range fs {
					if f.Type == gwv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil {
						// A mirror is sent in plain HTTP: one whose
						// Service asks for TLS is not configured.
						if b := resolve(f.RequestMirror.BackendRef, nil, corev1.ProtocolTCP); !b.Invalid && b.TLS == nil {
							out = append(out, mirrorOf(b, f.RequestMirror))
						}
					}
				}
				return out
			}
			var backends []dataplane.Backend
			for _, br := range rule.BackendRefs {
				b := resolve(br.BackendObjectReference, br.Weight, corev1.ProtocolTCP)
				b.Filters = br.Filters
				b.Mirrors = mirrorsOf(br.Filters)
				backends = append(backends, b)
			}
			mirrors := mirrorsOf(rule.Filters)
			if err := validRule(rule); err != "" {
				fail(gwv1.RouteReasonUnsupportedValue, err)
				backends = []dataplane.Backend{{Weight: 1, Invalid: true}}
				mirrors = nil
			}
			matches := rule.Matches
			if len(matches) == 0 {
				matches = []gwv1.HTTPRouteMatch{{}}
			}
			for mi, m := range matches {
				e := ruleEntry{
					rule:    dataplane.Rule{Route: name, Match: m, Filters: rule.Filters, Backends: backends, Timeouts: rule.Timeouts, Retry: rule.Retry, Mirrors: mirrors},
					created: rt.obj.GetCreationTimestamp(), route: name, index: ri,
				}
				if grpc != nil {
					e.rule.GRPC = true
					e.grpc = &grpcRank{}
					if mi < len(grpc[ri].Matches) {
						if mm := grpc[ri].Matches[mi].Method; mm != nil {
							e.grpc = &grpcRank{service: len(ptr.Deref(mm.Service, "")), method: len(ptr.Deref(mm.Method, ""))}
						}
					}
				}
				out.http = append(out.http, e)
			}
		}
	}

	if rt.kind.layer7() {
		l7Rules(rt.kind.httpRules(rt.obj))
	} else {
		for _, br := range rt.kind.l4Backends(rt.obj) {
			out.l4 = append(out.l4, resolve(br.BackendObjectReference, br.Weight, rt.kind.transport))
		}
	}
	return reason, msg, out
}

// validRule refuses what the data plane cannot do in a rule it still
// serves: a filter it does not implement (that rule's requests answer
// 500), on the rule or on a backendRef. A CORS filter is served on the
// rule only: on a backendRef the specification leaves it to the
// implementation (Extended), and the data plane, which answers a
// preflight before it picks a backend, does not take it there.
// Regular expressions and the filters' values are checked for the whole
// route, by invalidValue.
func validRule(rule gwv1.HTTPRouteRule) string {
	// An experimental field the data plane does not serve is refused, not
	// dropped (retry is served: retry.go).
	if rule.SessionPersistence != nil {
		return "sessionPersistence is not supported"
	}
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
			gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite, gwv1.HTTPRouteFilterCORS:
		case gwv1.HTTPRouteFilterRequestMirror:
			if f.RequestMirror == nil {
				return "filter RequestMirror has no requestMirror"
			}
		default:
			return fmt.Sprintf("filter %s is not supported", f.Type)
		}
	}
	// On a backendRef the data plane applies the header modifiers and
	// mirrors only; another filter there is refused rather than dropped,
	// as a rule's.
	for _, br := range rule.BackendRefs {
		for _, f := range br.Filters {
			switch f.Type {
			case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier, gwv1.HTTPRouteFilterRequestMirror:
			default:
				return fmt.Sprintf("filter %s is not supported on a backendRef (backendRef %s); set it on the rule", f.Type, br.Name)
			}
		}
	}
	return ""
}

// invalidValue names the first value of a route's rules that the data
// plane cannot compile, as it compiles them: a regular expression of a
// match (a path anchored whole, header and query values as given), a
// timeout, a retry stanza, a CORS filter's settings (an origin the CRD's pattern lets
// through, such as port 0); or "". The data plane refuses a whole
// configuration holding one, so such a route is not accepted and nothing
// of it is programmed: it costs only itself.
func invalidValue(rules []gwv1.HTTPRouteRule) string {
	for ri, rule := range rules {
		if err := dataplane.CheckTimeouts(rule.Timeouts); err != nil {
			return fmt.Sprintf("rule %d: %v", ri, err)
		}
		if err := dataplane.CheckRetry(rule.Retry); err != nil {
			return fmt.Sprintf("rule %d: %v", ri, err)
		}
		for _, f := range rule.Filters {
			if f.Type != gwv1.HTTPRouteFilterCORS {
				continue
			}
			if err := dataplane.CheckCORS(f.CORS); err != nil {
				return fmt.Sprintf("rule %d: filter CORS: %v", ri, err)
			}
		}
		for mi, m := range rule.Matches {
			where := fmt.Sprintf("rule %d match %d", ri, mi)
			if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gwv1.PathMatchRegularExpression && m.Path.Value != nil {
				if _, err := regexp.Compile("^(?:" + *m.Path.Value + ")$"); err != nil {
					return fmt.Sprintf("%s: path regular expression %q: %v", where, *m.Path.Value, err)
				}
			}
			for _, h := range m.Headers {
				if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
					if _, err := regexp.Compile(h.Value); err != nil {
						return fmt.Sprintf("%s: header %s regular expression %q: %v", where, h.Name, h.Value, err)
					}
				}
			}
			for _, q := range m.QueryParams {
				if q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression {
					if _, err := regexp.Compile(q.Value); err != nil {
						return fmt.Sprintf("%s: query parameter %s regular expression %q: %v", where, q.Name, q.Value, err)
					}
				}
			}
		}
	}
	return ""
}

func portString(p *gwv1.PortNumber) string {
	if p == nil {
		return "(none given)"
	}
	return strconv.Itoa(int(*p))
}

// serviceAddress is where the data plane sends a Service's traffic: its
// cluster IP, which kube-proxy spreads over the endpoints; a headless
// Service's pods by its DNS name (which resolves to them) at the target
// port.
func serviceAddress(svc *corev1.Service, port int32) string {
	host := svc.Spec.ClusterIP
	if host == "" || host == corev1.ClusterIPNone {
		host = svc.Name + "." + svc.Namespace + ".svc"
		for _, p := range svc.Spec.Ports {
			if p.Port == port && p.TargetPort.IntValue() > 0 {
				port = int32(p.TargetPort.IntValue())
			}
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// precedence orders matches. An HTTPRoute's: exact paths, then longer
// prefixes, then regular expressions; then a method; then more headers;
// then more query parameters. A GRPCRoute's: the longer service, then the
// longer method, then more headers. Then the older route, its name, its
// rule order. (HTTPRoutes and GRPCRoutes never share a hostname.)
func precedence(a, b ruleEntry) int {
	switch ga, gb := a.grpc, b.grpc; {
	case ga != nil && gb != nil:
		if d := gb.service - ga.service; d != 0 {
			return d
		}
		if d := gb.method - ga.method; d != 0 {
			return d
		}
	case ga != nil || gb != nil:
		if ga != nil {
			return 1
		}
		return -1
	default:
		pa, pb := pathRank(a.rule.Match), pathRank(b.rule.Match)
		if pa != pb {
			return pb - pa
		}
		if ma, mb := a.rule.Match.Method != nil, b.rule.Match.Method != nil; ma != mb {
			if ma {
				return -1
			}
			return 1
		}
	}
	if d := len(b.rule.Match.Headers) - len(a.rule.Match.Headers); d != 0 {
		return d
	}
	if d := len(b.rule.Match.QueryParams) - len(a.rule.Match.QueryParams); d != 0 {
		return d
	}
	if c := a.created.Compare(b.created.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.route, b.route); c != 0 {
		return c
	}
	return a.index - b.index
}

// pathRank puts exact paths first, then prefixes by length, then regular
// expressions.
func pathRank(m gwv1.HTTPRouteMatch) int {
	t, v := gwv1.PathMatchPathPrefix, "/"
	if m.Path != nil {
		if m.Path.Type != nil {
			t = *m.Path.Type
		}
		if m.Path.Value != nil {
			v = *m.Path.Value
		}
	}
	switch t {
	case gwv1.PathMatchExact:
		return 1<<20 + len(v)
	case gwv1.PathMatchRegularExpression:
		return 0
	}
	return 1 + len(strings.TrimSuffix(v, "/"))
}
