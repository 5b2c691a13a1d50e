package gateway

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// attachRoutes attaches the world's routes to the listeners, recording
// each route's parent statuses in r: through a parentRef to the Gateway to
// its own listeners, through one to a ListenerSet of it to that set's.
func attachRoutes(w *world, listeners []*listenerState, sets []*setState, r *result) {
	own := slices.DeleteFunc(slices.Clone(listeners), func(ls *listenerState) bool { return ls.set != nil })
	routes := slices.Clone(w.routes)
	// Oldest first, then by name: the order rule precedence ties break by.
	slices.SortStableFunc(routes, func(a, b route) int {
		if c := a.obj.GetCreationTimestamp().Compare(b.obj.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return strings.Compare(a.obj.GetNamespace()+"/"+a.obj.GetName(), b.obj.GetNamespace()+"/"+b.obj.GetName())
	})

	gw := w.gateway
	for _, rt := range routes {
		key := rt.key()
		gen := rt.obj.GetGeneration()
		for _, ref := range rt.kind.parentRefs(rt.obj) {
			var accepted, resolved metav1.Condition
			if refersTo(ref, rt.obj.GetNamespace(), gw) {
				accepted, resolved = attachOne(w, own, rt, ref)
			} else if i := slices.IndexFunc(sets, func(s *setState) bool { return refersToSet(ref, rt.obj.GetNamespace(), s.obj) }); i >= 0 {
				accepted, resolved = attachToSet(w, sets[i], rt, ref)
			} else {
				continue
			}
			accepted.ObservedGeneration, resolved.ObservedGeneration = gen, gen
			r.routeParents[key] = append(r.routeParents[key], gwv1.RouteParentStatus{
				ParentRef:      ref,
				ControllerName: w.controller,
				Conditions:     []metav1.Condition{accepted, resolved},
			})
		}
	}
}

// attachToSet attaches a route through a parentRef to a ListenerSet of
// the Gateway: to its listeners, when the Gateway takes it.
func attachToSet(w *world, s *setState, rt route, ref gwv1.ParentReference) (metav1.Condition, metav1.Condition) {
	if s.notAllowed != "" {
		return cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners), "the ListenerSet is not attached: "+s.notAllowed, 0),
			cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", 0)
	}
	return attachOne(w, s.listeners, rt, ref)
}

// refersTo says whether a parentRef names gw.
func refersTo(ref gwv1.ParentReference, routeNS string, gw *gwv1.Gateway) bool {
	if ref.Group != nil && *ref.Group != groupGateway {
		return false
	}
	if ref.Kind != nil && *ref.Kind != kindGateway {
		return false
	}
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return ns == gw.Namespace && string(ref.Name) == gw.Name
}

// attachOne attaches a route through one parentRef to the listeners it
// selects and says how that went.
func attachOne(w *world, listeners []*listenerState, rt route, ref gwv1.ParentReference) (metav1.Condition, metav1.Condition) {
	accepted := cond(string(gwv1.RouteConditionAccepted), true, string(gwv1.RouteReasonAccepted), "", 0)
	resolved := cond(string(gwv1.RouteConditionResolvedRefs), true, string(gwv1.RouteReasonResolvedRefs), "", 0)

	var selected []*listenerState
	for _, ls := range listeners {
		if ref.SectionName != nil && *ref.SectionName != ls.spec.Name {
			continue
		}
		if ref.Port != nil && *ref.Port != ls.spec.Port {
			continue
		}
		selected = append(selected, ls)
	}
	if len(selected) == 0 {
		accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingParent), "no listener matches the parentRef's sectionName and port", 0)
		return accepted, resolved
	}

	if rt.kind.layer7() {
		rules, _ := rt.kind.httpRules(rt.obj)
		if msg := invalidValue(rules); msg != "" {
			accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonUnsupportedValue), msg, 0)
			return accepted, resolved
		}
	}

	// Backends resolve once per route, whatever listener takes it.
	reason, msg, backends := resolveBackends(w, rt)
	if reason != "" {
		resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, reason, msg, 0)
	}

	var allowed, hostMatched, kindConflicted []*listenerState
	for _, ls := range selected {
		if !ls.attachable || !kindAllowed(ls, rt.kind.name) || !namespaceAllowed(w, ls, rt.obj.GetNamespace()) {
			continue
		}
		allowed = append(allowed, ls)
	}
	if len(allowed) == 0 {
		accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners), "no listener selected allows this route", 0)
		return accepted, resolved
	}
	for _, ls := range allowed {
		hosts := effectiveHostnames(ls.hostname, rt.kind.hostnames(rt.obj))
		if hosts == nil {
			continue
		}
		hostMatched = append(hostMatched, ls)
		if rt.kind.layer7() {
			if l7Conflict(ls, rt.kind.name, hosts) {
				kindConflicted = append(kindConflicted, ls)
				continue
			}
			ls.attached++
			ls.l7hosts[rt.kind.name] = append(ls.l7hosts[rt.kind.name], hosts...)
			for _, h := range hosts {
				ls.hosts[h] = append(ls.hosts[h], backends.http...)
			}
		} else if rt.kind.sni {
			// A TLSRoute's hostnames are server names of the
			// listener's port: each is the oldest route's that gives it
			// (routes come oldest first); the others are accepted and
			// counted, as for TCP routes.
			ls.attached++
			for _, h := range hosts {
				if slices.ContainsFunc(ls.tlsHosts, func(o dataplane.TLSHost) bool { return o.Hostname == h }) {
					continue
				}
				ls.tlsHosts = append(ls.tlsHosts, dataplane.TLSHost{Hostname: h, Route: rt.name(), Terminate: ls.terminates(), Backends: backends.l4})
			}
		} else {
			// One route per TCP or UDP listener serves: the oldest
			// (routes come oldest first). The others are accepted and
			// counted, as the specification has it.
			ls.attached++
			name := rt.name()
			if ls.l4owner == "" || ls.l4owner == name {
				ls.l4owner = name
				ls.l4backends = append(ls.l4backends, backends.l4...)
			}
		}
	}
	switch {
	case len(hostMatched) == 0:
		accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNoMatchingListenerHostname), "no hostname of the route matches a listener's", 0)
	case len(kindConflicted) == len(hostMatched):
		other := kindHTTPRoute
		if rt.kind.name == kindHTTPRoute {
			other = kindGRPCRoute
		}
		accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners),
			fmt.Sprintf("an older %s on the listener serves a hostname of this route", other), 0)
	}
	return accepted, resolved
}

// l7Conflict says whether a listener already has a route of the other of
// HTTPRoute and GRPCRoute with a hostname in common with hosts: the
// specification accepts only the older of the two (routes come oldest
// first, then by name).
func l7Conflict(ls *listenerState, kind string, hosts []string) bool {
	other := kindHTTPRoute
	if kind == kindHTTPRoute {
		other = kindGRPCRoute
	}
	for _, a := range ls.l7hosts[other] {
		for _, b := range hosts {
			if a == "" || b == "" || hostMatches(a, b) {
				return true
			}
		}
	}
	return false
}

func kindAllowed(ls *listenerState, kind string) bool {
	return slices.ContainsFunc(ls.status.SupportedKinds, func(k gwv1.RouteGroupKind) bool { return string(k.Kind) == kind })
}

func namespaceAllowed(w *world, ls *listenerState, ns string) bool {
	from := gwv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if ar := ls.spec.AllowedRoutes; ar != nil && ar.Namespaces != nil {
		if ar.Namespaces.From != nil {
			from = *ar.Namespaces.From
		}
		sel = ar.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSelector:
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || sel == nil {
			return false
		}
		n, ok := w.namespaces[ns]
		return ok && s.Matches(labels.Set(n.Labels))
	case gwv1.NamespacesFromSame:
		own, _ := ls.namespace(w.gateway)
		return ns == own
	}
	return false
}

// effectiveHostnames intersects a listener's hostname with a route's: nil
// when none match, [""] for any host.
func effectiveHostnames(listener string, route []gwv1.Hostname) []string {
	if len(route) == 0 {
		return []string{listener}
	}
	var out []string
	for _, h := range route {
		rh := strings.ToLower(string(h))
		switch {
		case listener == "":
			out = append(out, rh)
		case hostMatches(listener, rh):
			// The more specific of the two.
			if strings.HasPrefix(rh, "*.") && !strings.HasPrefix(listener, "*.") {
				out = append(out, listener)
			} else if strings.HasPrefix(listener, "*.") && strings.HasPrefix(rh, "*.") && len(listener) > len(rh) {
				out = append(out, listener)
			} else {
				out = append(out, rh)
			}
		}
	}
	return out
}

// hostMatches says whether two hostnames, either possibly a wildcard,
// have a host in common.
func hostMatches(a, b string) bool {
	wild := func(w, h string) bool {
		suffix := w[1:]
		return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
	}
	switch aw, bw := strings.HasPrefix(a, "*."), strings.HasPrefix(b, "*."); {
	case !aw && !bw:
		return a == b
	case aw && !bw:
		return wild(a, b)
	case !aw && bw:
		return wild(b, a)
	default:
		return wild(a, b) || wild(b, a) || a == b
	}
}
