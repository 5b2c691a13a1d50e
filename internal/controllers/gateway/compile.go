package gateway

import (
	"crypto/tls"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// world is what compiling one Gateway reads, gathered by the reconciler
// from the cache so compile itself is a pure function.
type world struct {
	controller gwv1.GatewayController
	// grpc: GRPCRoutes are served (their CRD is there); HTTP listeners
	// support them.
	grpc       bool
	gateway    *gwv1.Gateway
	httpRoutes []*gwv1.HTTPRoute
	grpcRoutes []*gwv1.GRPCRoute
	tcpRoutes  []*gwv1.TCPRoute
	udpRoutes  []*gwv1.UDPRoute
	// services by namespace/name.
	services map[types.NamespacedName]*corev1.Service
	// secrets by namespace/name: the certificates listeners refer to.
	secrets    map[types.NamespacedName]*corev1.Secret
	grants     []*gwv1.ReferenceGrant
	namespaces map[string]*corev1.Namespace
	// classParameters: the GatewayClass names a parametersRef.
	classParameters bool
	// refused are the transport protocols ("UDP") the provider's load
	// balancer refused for this generation of the Gateway, with the
	// provider's words: their listeners are not accepted.
	refused map[corev1.Protocol]string
	// missingSecrets is set by compile when a certificate Secret a
	// listener names does not exist (yet).
	missingSecrets bool
}

// result is what one Gateway compiles to: the data plane's programming,
// the ports its load balancer serves, and every status to write.
type result struct {
	config    dataplane.Config
	ports     []corev1.ServicePort
	listeners []gwv1.ListenerStatus
	// accepted is the Gateway's Accepted condition (listeners may still
	// be invalid one by one).
	accepted metav1.Condition
	// routeParents are the parent statuses of every route that names
	// this Gateway, by kind and namespace/name.
	routeParents map[routeKey][]gwv1.RouteParentStatus
}

type routeKey struct {
	kind string
	name types.NamespacedName
}

const (
	kindHTTPRoute = "HTTPRoute"
	kindGRPCRoute = "GRPCRoute"
	kindTCPRoute  = "TCPRoute"
	kindUDPRoute  = "UDPRoute"
	kindService   = "Service"
	kindSecret    = "Secret"
	kindGateway   = "Gateway"
)

var groupGateway = gwv1.Group(gwv1.GroupName)

// transport is the protocol a listener's load balancer port carries.
func transport(p gwv1.ProtocolType) corev1.Protocol {
	if p == gwv1.UDPProtocolType {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}

// listenerState is one listener as compiled so far.
type listenerState struct {
	spec   gwv1.Listener
	status gwv1.ListenerStatus
	valid  bool // accepted, not conflicted, refs resolved: programmed
	// attachable: accepted and not conflicted. Routes attach (and count)
	// even while its references are unresolved, as the specification
	// asks; only a valid listener is programmed.
	attachable bool
	// l4owner is the route whose backends a TCP or UDP listener serves:
	// the oldest attached.
	l4owner string
	// l7hosts are the effective hostnames of the HTTPRoutes and
	// GRPCRoutes attached, by kind: a route of one kind whose hostnames
	// meet the other kind's is not attached (the older route wins).
	l7hosts    map[string][]string
	certs      []dataplane.Certificate
	hostname   string
	attached   int32
	hosts      map[string][]ruleEntry // HTTP: effective hostname -> rules
	l4backends []dataplane.Backend
}

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

func cond(t string, ok bool, reason string, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// routeKinds are the kinds a listener of each protocol serves; grpc: with
// GRPCRoutes on HTTP and HTTPS.
func routeKinds(p gwv1.ProtocolType, grpc bool) []gwv1.RouteGroupKind {
	switch p {
	case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType:
		if grpc {
			return []gwv1.RouteGroupKind{{Group: &groupGateway, Kind: kindHTTPRoute}, {Group: &groupGateway, Kind: kindGRPCRoute}}
		}
		return []gwv1.RouteGroupKind{{Group: &groupGateway, Kind: kindHTTPRoute}}
	case gwv1.TCPProtocolType:
		return []gwv1.RouteGroupKind{{Group: &groupGateway, Kind: kindTCPRoute}}
	case gwv1.UDPProtocolType:
		return []gwv1.RouteGroupKind{{Group: &groupGateway, Kind: kindUDPRoute}}
	}
	return nil
}

// compile turns one Gateway and what it refers to into its data plane
// config and statuses.
func compile(w *world) *result {
	gw := w.gateway
	gen := gw.Generation
	r := &result{routeParents: map[routeKey][]gwv1.RouteParentStatus{}}
	r.config = dataplane.Config{Gateway: gw.Namespace + "/" + gw.Name, Generation: gen}

	listeners := make([]*listenerState, 0, len(gw.Spec.Listeners))
	portProto := map[gwv1.PortNumber]gwv1.ProtocolType{}
	hostSeen := map[string]bool{}
	for _, l := range gw.Spec.Listeners {
		ls := &listenerState{spec: l, valid: true, hosts: map[string][]ruleEntry{}, l7hosts: map[string][]string{}}
		if l.Hostname != nil {
			ls.hostname = strings.ToLower(string(*l.Hostname))
		}
		ls.status.Name = l.Name
		kinds, kindsOK := allowedKinds(l, w.grpc)
		ls.status.SupportedKinds = kinds
		accepted := cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen)
		resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen)
		conflicted := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen)

		switch l.Protocol {
		case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType, gwv1.TCPProtocolType, gwv1.UDPProtocolType:
			if msg, ok := w.refused[transport(l.Protocol)]; ok {
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol),
					fmt.Sprintf("the provider's load balancer refused %s listeners: %s", transport(l.Protocol), msg), gen)
				ls.valid = false
			}
		default:
			accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol),
				fmt.Sprintf("protocol %s is not served", l.Protocol), gen)
			ls.valid = false
		}
		if !kindsOK {
			resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, string(gwv1.ListenerReasonInvalidRouteKinds),
				"allowedRoutes.kinds names a kind this listener cannot serve", gen)
			if len(kinds) == 0 {
				ls.valid = false
			}
		}
		if ls.valid {
			// Protocols share a port only as TCP with UDP, or as equals;
			// HTTP listeners on one port differ by hostname.
			key := string(l.Protocol)
			if prev, ok := portProto[l.Port]; ok && prev != l.Protocol && !(isL4(prev) && isL4(l.Protocol) && prev != l.Protocol) {
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonProtocolConflict),
					fmt.Sprintf("port %d is already %s", l.Port, prev), gen)
				ls.valid = false
			} else if hk := fmt.Sprintf("%d/%s/%s", l.Port, key, ls.hostname); hostSeen[hk] {
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonHostnameConflict),
					fmt.Sprintf("another listener on port %d has the same hostname", l.Port), gen)
				ls.valid = false
			} else {
				if _, ok := portProto[l.Port]; !ok || isL4(l.Protocol) {
					portProto[l.Port] = l.Protocol
				}
				hostSeen[hk] = true
			}
		}
		ls.attachable = ls.valid
		if ls.valid && l.Protocol == gwv1.HTTPSProtocolType {
			if reason, msg := ls.resolveCertificates(w); reason != "" {
				resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, reason, msg, gen)
				ls.valid = false
			}
		}
		programmed := cond(string(gwv1.ListenerConditionProgrammed), ls.valid, string(gwv1.ListenerReasonProgrammed), "", gen)
		if !ls.valid {
			programmed.Reason = string(gwv1.ListenerReasonInvalid)
			programmed.Message = "the listener is not valid; see its other conditions"
		}
		ls.status.Conditions = []metav1.Condition{accepted, resolved, conflicted, programmed}
		listeners = append(listeners, ls)
	}

	attachRoutes(w, listeners, r)

	// Ports: one per port and protocol, listeners of a port merged.
	type portBuild struct {
		port  dataplane.Port
		hosts map[string][]ruleEntry
	}
	byPort := map[string]*portBuild{}
	var order []string
	for _, ls := range listeners {
		ls.status.AttachedRoutes = ls.attached
		r.listeners = append(r.listeners, ls.status)
		if !ls.valid {
			continue
		}
		proto := dataplaneProtocol(ls.spec.Protocol)
		k := fmt.Sprintf("%d/%s", ls.spec.Port, proto)
		pb, ok := byPort[k]
		if !ok {
			pb = &portBuild{port: dataplane.Port{Port: ls.spec.Port, Protocol: proto}, hosts: map[string][]ruleEntry{}}
			byPort[k] = pb
			order = append(order, k)
		}
		pb.port.Certificates = append(pb.port.Certificates, ls.certs...)
		pb.port.Backends = append(pb.port.Backends, ls.l4backends...)
		for host, entries := range ls.hosts {
			pb.hosts[host] = append(pb.hosts[host], entries...)
		}
	}
	for _, k := range order {
		pb := byPort[k]
		p := pb.port
		for host, entries := range pb.hosts {
			slices.SortStableFunc(entries, precedence)
			rules := make([]dataplane.Rule, 0, len(entries))
			for _, e := range entries {
				rules = append(rules, e.rule)
			}
			p.Hosts = append(p.Hosts, dataplane.VirtualHost{Hostname: host, Rules: rules})
		}
		slices.SortFunc(p.Hosts, func(a, b dataplane.VirtualHost) int { return strings.Compare(a.Hostname, b.Hostname) })
		r.config.Ports = append(r.config.Ports, p)
		sp := corev1.ServicePort{Name: strings.ToLower(fmt.Sprintf("%s-%d", p.Protocol, p.Port)), Port: p.Port, TargetPort: intstr.FromInt32(p.Port), Protocol: corev1.ProtocolTCP}
		if p.Protocol == dataplane.UDP {
			sp.Protocol = corev1.ProtocolUDP
		}
		r.ports = append(r.ports, sp)
	}

	valid := 0
	for _, ls := range listeners {
		if ls.valid {
			valid++
		}
	}
	switch {
	case len(listeners) > 0 && valid == 0:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid), "no listener is valid", gen)
	case gw.Spec.Infrastructure != nil && gw.Spec.Infrastructure.ParametersRef != nil:
		// Nothing is read from a parameters object yet: refused, not
		// ignored.
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonInvalidParameters),
			"spec.infrastructure.parametersRef is not supported", gen)
	case w.classParameters:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonInvalidParameters),
			"the GatewayClass's parametersRef is not supported", gen)
	case addressUnsupported(gw) != "":
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress), addressUnsupported(gw), gen)
	case valid < len(listeners):
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonListenersNotValid), "some listeners are not valid", gen)
	default:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "", gen)
	}
	return r
}

func isL4(p gwv1.ProtocolType) bool {
	return p == gwv1.TCPProtocolType || p == gwv1.UDPProtocolType
}

func dataplaneProtocol(p gwv1.ProtocolType) dataplane.Protocol {
	return dataplane.Protocol(p)
}

// addressUnsupported says why spec.addresses cannot be honoured, or "".
func addressUnsupported(gw *gwv1.Gateway) string {
	if len(gw.Spec.Addresses) > 1 {
		return "at most one address is honoured"
	}
	for _, a := range gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gwv1.IPAddressType {
			return fmt.Sprintf("address type %s is not supported; use IPAddress", *a.Type)
		}
		if a.Value != "" && net.ParseIP(a.Value) == nil {
			return fmt.Sprintf("address %q is not an IP address", a.Value)
		}
	}
	return ""
}

// allowedKinds is the listener's supported kinds and whether every kind it
// asks for is one of them.
func allowedKinds(l gwv1.Listener, grpc bool) ([]gwv1.RouteGroupKind, bool) {
	served := routeKinds(l.Protocol, grpc)
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return served, true
	}
	var out []gwv1.RouteGroupKind
	ok := true
	for _, k := range l.AllowedRoutes.Kinds {
		group := groupGateway
		if k.Group != nil {
			group = *k.Group
		}
		if slices.ContainsFunc(served, func(s gwv1.RouteGroupKind) bool { return *s.Group == group && s.Kind == k.Kind }) {
			out = append(out, gwv1.RouteGroupKind{Group: &groupGateway, Kind: k.Kind})
		} else {
			ok = false
		}
	}
	if out == nil {
		out = []gwv1.RouteGroupKind{}
	}
	return out, ok
}

// resolveCertificates loads an HTTPS listener's certificates; a failure
// is a ResolvedRefs reason and message.
func (ls *listenerState) resolveCertificates(w *world) (string, string) {
	tlsc := ls.spec.TLS
	if tlsc == nil || len(tlsc.CertificateRefs) == 0 {
		return string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs"
	}
	if tlsc.Mode != nil && *tlsc.Mode != gwv1.TLSModeTerminate {
		return string(gwv1.ListenerReasonInvalidCertificateRef), "HTTPS listeners terminate TLS; Passthrough is not served"
	}
	gw := w.gateway
	for _, ref := range tlsc.CertificateRefs {
		if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != kindSecret) {
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("certificateRef %s is not a Secret", ref.Name)
		}
		ns := gw.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != gw.Namespace && !granted(w.grants, groupGateway, kindGateway, gw.Namespace, "", kindSecret, ns, string(ref.Name)) {
			return string(gwv1.ListenerReasonRefNotPermitted), fmt.Sprintf("no ReferenceGrant in %s allows Secret %s", ns, ref.Name)
		}
		s, ok := w.secrets[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if !ok {
			w.missingSecrets = true
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("Secret %s/%s not found", ns, ref.Name)
		}
		certPEM, keyPEM := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("Secret %s/%s holds no valid certificate and key: %v", ns, ref.Name, err)
		}
		ls.certs = append(ls.certs, dataplane.Certificate{Hostname: ls.hostname, CertPEM: certPEM, KeyPEM: keyPEM})
	}
	return "", ""
}

// granted says whether a ReferenceGrant in toNS lets objects of fromKind
// in fromNS refer to toKind named name.
func granted(grants []*gwv1.ReferenceGrant, fromGroup gwv1.Group, fromKind, fromNS string, toGroup gwv1.Group, toKind, toNS, name string) bool {
	for _, g := range grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == fromGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return t.Group == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

// routeMeta is what attaching needs of any route kind.
type routeMeta struct {
	kind      string
	obj       metav1.Object
	parents   []gwv1.ParentReference
	hostnames []gwv1.Hostname
	status    []gwv1.RouteParentStatus
}

func attachRoutes(w *world, listeners []*listenerState, r *result) {
	var routes []routeMeta
	for _, hr := range w.httpRoutes {
		routes = append(routes, routeMeta{kindHTTPRoute, hr, hr.Spec.ParentRefs, hr.Spec.Hostnames, hr.Status.Parents})
	}
	for _, gr := range w.grpcRoutes {
		routes = append(routes, routeMeta{kindGRPCRoute, gr, gr.Spec.ParentRefs, gr.Spec.Hostnames, gr.Status.Parents})
	}
	for _, tr := range w.tcpRoutes {
		routes = append(routes, routeMeta{kindTCPRoute, tr, tr.Spec.ParentRefs, nil, tr.Status.Parents})
	}
	for _, ur := range w.udpRoutes {
		routes = append(routes, routeMeta{kindUDPRoute, ur, ur.Spec.ParentRefs, nil, ur.Status.Parents})
	}
	// Oldest first, then by name: the order rule precedence ties break by.
	slices.SortStableFunc(routes, func(a, b routeMeta) int {
		if c := a.obj.GetCreationTimestamp().Compare(b.obj.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return strings.Compare(a.obj.GetNamespace()+"/"+a.obj.GetName(), b.obj.GetNamespace()+"/"+b.obj.GetName())
	})

	gw := w.gateway
	for _, rt := range routes {
		key := routeKey{kind: rt.kind, name: types.NamespacedName{Namespace: rt.obj.GetNamespace(), Name: rt.obj.GetName()}}
		gen := rt.obj.GetGeneration()
		for _, ref := range rt.parents {
			if !refersTo(ref, rt.obj.GetNamespace(), gw) {
				continue
			}
			accepted, resolved := attachOne(w, listeners, rt, ref)
			accepted.ObservedGeneration, resolved.ObservedGeneration = gen, gen
			r.routeParents[key] = append(r.routeParents[key], gwv1.RouteParentStatus{
				ParentRef:      ref,
				ControllerName: w.controller,
				Conditions:     []metav1.Condition{accepted, resolved},
			})
		}
	}
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
func attachOne(w *world, listeners []*listenerState, rt routeMeta, ref gwv1.ParentReference) (metav1.Condition, metav1.Condition) {
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

	// Backends resolve once per route, whatever listener takes it.
	reason, msg, backends := resolveBackends(w, rt)
	if reason != "" {
		resolved = cond(string(gwv1.RouteConditionResolvedRefs), false, reason, msg, 0)
	}

	var allowed, hostMatched, kindConflicted []*listenerState
	for _, ls := range selected {
		if !ls.attachable || !kindAllowed(ls, rt.kind) || !namespaceAllowed(w, ls, rt.obj.GetNamespace()) {
			continue
		}
		allowed = append(allowed, ls)
	}
	if len(allowed) == 0 {
		accepted = cond(string(gwv1.RouteConditionAccepted), false, string(gwv1.RouteReasonNotAllowedByListeners), "no listener selected allows this route", 0)
		return accepted, resolved
	}
	for _, ls := range allowed {
		hosts := effectiveHostnames(ls.hostname, rt.hostnames)
		if hosts == nil {
			continue
		}
		hostMatched = append(hostMatched, ls)
		switch rt.kind {
		case kindHTTPRoute, kindGRPCRoute:
			if l7Conflict(ls, rt.kind, hosts) {
				kindConflicted = append(kindConflicted, ls)
				continue
			}
			ls.attached++
			ls.l7hosts[rt.kind] = append(ls.l7hosts[rt.kind], hosts...)
			for _, h := range hosts {
				ls.hosts[h] = append(ls.hosts[h], backends.http...)
			}
		default:
			// One route per TCP or UDP listener serves: the oldest
			// (routes come oldest first). The others are accepted and
			// counted, as the specification has it.
			ls.attached++
			name := rt.obj.GetNamespace() + "/" + rt.obj.GetName()
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
		if rt.kind == kindHTTPRoute {
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
		return ns == w.gateway.Namespace
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

type resolvedBackends struct {
	http []ruleEntry
	l4   []dataplane.Backend
}

// resolveBackends compiles a route's rules with their backends; the first
// failing reference gives ResolvedRefs' reason.
func resolveBackends(w *world, rt routeMeta) (string, string, resolvedBackends) {
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
		if ns != rt.obj.GetNamespace() && !granted(w.grants, groupGateway, rt.kind, rt.obj.GetNamespace(), "", kindService, ns, string(ref.Name)) {
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
		b.H2C = rt.kind == kindGRPCRoute || slices.Contains(h2cAppProtocols, ptr.Deref(svc.Spec.Ports[i].AppProtocol, ""))
		return b
	}
	// l7Rules compiles HTTPRoute rules, and GRPCRoute rules made into
	// them, with their backends.
	l7Rules := func(rules []gwv1.HTTPRouteRule, grpc []gwv1.GRPCRouteRule) {
		name := rt.obj.GetNamespace() + "/" + rt.obj.GetName()
		for ri, rule := range rules {
			var backends []dataplane.Backend
			for _, br := range rule.BackendRefs {
				b := resolve(br.BackendObjectReference, br.Weight, corev1.ProtocolTCP)
				b.Filters = br.Filters
				backends = append(backends, b)
			}
			if err := validRule(rule); err != "" {
				fail(gwv1.RouteReasonUnsupportedValue, err)
				backends = []dataplane.Backend{{Weight: 1, Invalid: true}}
			}
			matches := rule.Matches
			if len(matches) == 0 {
				matches = []gwv1.HTTPRouteMatch{{}}
			}
			for mi, m := range matches {
				e := ruleEntry{
					rule:    dataplane.Rule{Route: name, Match: m, Filters: rule.Filters, Backends: backends},
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

	switch route := rt.obj.(type) {
	case *gwv1.HTTPRoute:
		l7Rules(route.Spec.Rules, nil)
	case *gwv1.GRPCRoute:
		rules := make([]gwv1.HTTPRouteRule, 0, len(route.Spec.Rules))
		for _, rule := range route.Spec.Rules {
			rules = append(rules, httpRule(rule))
		}
		l7Rules(rules, route.Spec.Rules)
	case *gwv1.TCPRoute:
		for _, rule := range route.Spec.Rules {
			for _, br := range rule.BackendRefs {
				out.l4 = append(out.l4, resolve(br.BackendObjectReference, br.Weight, corev1.ProtocolTCP))
			}
		}
	case *gwv1.UDPRoute:
		for _, rule := range route.Spec.Rules {
			for _, br := range rule.BackendRefs {
				out.l4 = append(out.l4, resolve(br.BackendObjectReference, br.Weight, corev1.ProtocolUDP))
			}
		}
	}
	return reason, msg, out
}

// validRule refuses what the data plane cannot do: a regular expression
// Go cannot compile, a filter it does not implement.
func validRule(rule gwv1.HTTPRouteRule) string {
	for _, m := range rule.Matches {
		if m.Path != nil && m.Path.Type != nil && *m.Path.Type == gwv1.PathMatchRegularExpression && m.Path.Value != nil {
			if _, err := regexp.Compile(*m.Path.Value); err != nil {
				return fmt.Sprintf("path regular expression: %v", err)
			}
		}
		for _, h := range m.Headers {
			if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
				if _, err := regexp.Compile(h.Value); err != nil {
					return fmt.Sprintf("header %s regular expression: %v", h.Name, err)
				}
			}
		}
	}
	for _, f := range rule.Filters {
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier, gwv1.HTTPRouteFilterResponseHeaderModifier,
			gwv1.HTTPRouteFilterRequestRedirect, gwv1.HTTPRouteFilterURLRewrite:
		default:
			return fmt.Sprintf("filter %s is not supported", f.Type)
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
