package gateway

import (
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// world is what compiling one Gateway reads, gathered by the reconciler
// from the cache so compile itself is a pure function.
type world struct {
	controller gwv1.GatewayController
	// kinds are the route kinds served (GRPCRoute only where its CRD is):
	// listeners support only these.
	kinds   []*routeKind
	gateway *gwv1.Gateway
	// routes are the routes that name the Gateway (or did), of the kinds
	// served, in the order of routeKindTable.
	routes []route
	// services by namespace/name.
	services map[types.NamespacedName]*corev1.Service
	// secrets by namespace/name: the certificates listeners refer to,
	// and the backend client certificate (backendclient.go).
	secrets map[types.NamespacedName]*corev1.Secret
	// caMaps by namespace/name: the ConfigMaps spec.tls.frontend's
	// caCertificateRefs name, read as secrets are (frontend.go).
	caMaps     map[types.NamespacedName]*corev1.ConfigMap
	grants     []*gwv1.ReferenceGrant
	namespaces map[string]*corev1.Namespace
	// classParameters is the GatewayClass's parametersRef (nil none).
	classParameters *gwv1.ParametersReference
	// configMaps by namespace/name: those labelled ParametersLabel that
	// the class's or the Gateway's parametersRef names.
	configMaps map[types.NamespacedName]*corev1.ConfigMap
	// parametersServed: ConfigMaps are watched, so parametersRefs are
	// read (otherwise refused).
	parametersServed bool
	// refused are the transport protocols ("UDP") the provider's load
	// balancer refused for this generation of the Gateway, with the
	// provider's words: their listeners are not accepted.
	refused map[corev1.Protocol]string
	// tlsPolicies are the BackendTLSPolicies that concern the Gateway
	// (none where the CRD is not served), and policies what compile
	// decided of them, set on its own copy (backendtls.go).
	tlsPolicies []*gwv1.BackendTLSPolicy
	policies    backendPolicies
	// listenerSets are the ListenerSets whose parentRef names the Gateway
	// (none where the CRD is not served), allowed or not (listenerset.go).
	listenerSets []*gwv1.ListenerSet
	// setsServed: ListenerSets are watched, and setsExisting are those
	// that exist (any Gateway's), so a route's entry for one deleted is
	// seen as such.
	setsServed   bool
	setsExisting map[types.NamespacedName]bool
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
	// resolvedRefs is the Gateway's ResolvedRefs condition: its
	// backend client certificate's, else its listeners' summed up
	// (backendclient.go).
	resolvedRefs metav1.Condition
	// backendClient: the Gateway names a backend client certificate,
	// read again every certificateRecheck.
	backendClient bool
	// routeParents are the parent statuses of every route that names
	// this Gateway, by kind and namespace/name.
	routeParents map[routeKey][]gwv1.RouteParentStatus
	// missingSecrets: a certificate Secret (or CA ConfigMap) a listener
	// names does not exist (yet); it is read again soon.
	missingSecrets bool
	// insecureFrontend: a client validation of the Gateway serves
	// clients without a valid certificate (its
	// InsecureFrontendValidationMode condition).
	insecureFrontend bool
	// policies are the verdicts of the BackendTLSPolicies that target
	// the Gateway's backends, for their status; backendCA: one names a
	// CA ConfigMap, read again every backendCARecheck.
	policies  []*policyVerdict
	backendCA bool
	// params are the Gateway's settings (the defaults when refused):
	// those of its load balancer's Service and Deployment here, those of
	// the data plane in config.
	params parameters
	// sets are the statuses of the ListenerSets that name the Gateway,
	// in precedence order; attachedSets how many are attached.
	sets         []setResult
	attachedSets int32
	// setCertificates: a ListenerSet taken has an HTTPS listener, whose
	// certificates are read again every certificateRecheck.
	setCertificates bool
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
	kindTLSRoute  = "TLSRoute"
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
	spec gwv1.Listener
	// set is the ListenerSet the listener is an entry of, nil for the
	// Gateway's own.
	set    *gwv1.ListenerSet
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
	l7hosts map[string][]string
	certs   []dataplane.Certificate
	// clientValidation is an HTTPS listener's port's check of client
	// certificates (spec.tls.frontend), nil none.
	clientValidation *dataplane.ClientValidation
	hostname         string
	attached         int32
	hosts            map[string][]ruleEntry // HTTP: effective hostname -> rules
	l4backends       []dataplane.Backend
	// tlsHosts are a TLS listener's server names, each the oldest
	// TLSRoute's that gave it (in the order given).
	tlsHosts []dataplane.TLSHost
}

// namespace is where the listener is defined: its Gateway's, or its
// ListenerSet's; fromKind the kind that refers to what it names.
func (ls *listenerState) namespace(gw *gwv1.Gateway) (ns, fromKind string) {
	if ls.set != nil {
		return ls.set.Namespace, kindListenerSet
	}
	return gw.Namespace, kindGateway
}

// terminates says whether a TLS listener ends TLS itself: its mode,
// Terminate when not given (the specification's default).
func (ls *listenerState) terminates() bool {
	return ls.spec.TLS == nil || ls.spec.TLS.Mode == nil || *ls.spec.TLS.Mode == gwv1.TLSModeTerminate
}

func cond(t string, ok bool, reason string, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// routeKinds are the kinds, of those served, a listener of protocol p
// serves.
func routeKinds(p gwv1.ProtocolType, kinds []*routeKind) []gwv1.RouteGroupKind {
	var out []gwv1.RouteGroupKind
	for _, k := range kinds {
		if slices.Contains(k.protocols, p) {
			out = append(out, gwv1.RouteGroupKind{Group: &groupGateway, Kind: gwv1.Kind(k.name)})
		}
	}
	return out
}

// compile turns one Gateway and what it refers to into its data plane
// config and statuses. It is pure: it reads w and changes nothing in it
// (nor in the objects w points to); everything it decides is in the
// result, which the golden files of testdata/ pin.
func compile(w *world) *result {
	gw := w.gateway
	gen := gw.Generation
	r := &result{routeParents: map[routeKey][]gwv1.RouteParentStatus{}}
	r.config = dataplane.Config{Gateway: gw.Namespace + "/" + gw.Name, Generation: gen}
	// The policies decided travel with the world to where backends
	// resolve; the caller's world is left as it was.
	decided := *w
	decided.policies = decidePolicies(w)
	w = &decided
	r.policies = w.policies.verdicts
	for _, v := range r.policies {
		r.backendCA = r.backendCA || v.namesConfigMap
		r.missingSecrets = r.missingSecrets || v.missing
	}
	params, invalidParams := resolveParameters(w)
	if invalidParams == "" {
		r.params, r.config.Settings = params, params.settings
	} else {
		r.params = defaultParameters()
	}

	// The Gateway's listeners, then those of the ListenerSets it takes,
	// in precedence order (listenerset.go).
	type source struct {
		spec gwv1.Listener
		set  *setState
	}
	sources := make([]source, 0, len(gw.Spec.Listeners))
	for _, l := range gw.Spec.Listeners {
		sources = append(sources, source{spec: l})
	}
	sets := make([]*setState, 0, len(w.listenerSets))
	for _, obj := range slices.SortedStableFunc(slices.Values(w.listenerSets), setPrecedence) {
		s := &setState{obj: obj, notAllowed: setAllowed(w, obj)}
		sets = append(sets, s)
		if s.notAllowed != "" {
			continue
		}
		for _, e := range obj.Spec.Listeners {
			sources = append(sources, source{spec: entryListener(e), set: s})
		}
	}
	gatewayGen := gen
	listeners := make([]*listenerState, 0, len(sources))
	portProto := map[gwv1.PortNumber]gwv1.ProtocolType{}
	hostSeen := map[string]bool{}
	for _, src := range sources {
		l := src.spec
		ls := &listenerState{spec: l, valid: true, hosts: map[string][]ruleEntry{}, l7hosts: map[string][]string{}}
		// A ListenerSet's listener's conditions observe the ListenerSet.
		gen := gatewayGen
		if src.set != nil {
			ls.set, gen = src.set.obj, src.set.obj.Generation
			src.set.listeners = append(src.set.listeners, ls)
		}
		if l.Hostname != nil {
			ls.hostname = strings.ToLower(string(*l.Hostname))
		}
		ls.status.Name = l.Name
		kinds, kindsOK := allowedKinds(l, w.kinds)
		ls.status.SupportedKinds = kinds
		accepted := cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen)
		resolved := cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen)
		conflicted := cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen)

		switch l.Protocol {
		case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType, gwv1.TCPProtocolType, gwv1.UDPProtocolType, gwv1.TLSProtocolType:
			if len(routeKinds(l.Protocol, w.kinds)) == 0 {
				// TLS without TLSRoutes (their CRD absent): nothing
				// could attach.
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonUnsupportedProtocol),
					fmt.Sprintf("protocol %s is not served: no route kind of it is", l.Protocol), gen)
				ls.valid = false
			} else if msg, ok := w.refused[transport(l.Protocol)]; ok {
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
			// HTTP listeners on one port differ by hostname. Of two that
			// conflict, the first (in precedence order) is served and the
			// other not accepted (where the specification is heading:
			// ListenerSets' conformance asks it).
			hk := fmt.Sprintf("%d/%s/%s", l.Port, l.Protocol, ls.hostname)
			if prev, ok := portProto[l.Port]; ok && prev != l.Protocol && !(isL4(prev) && isL4(l.Protocol) && prev != l.Protocol) {
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonProtocolConflict),
					fmt.Sprintf("port %d is already %s", l.Port, prev), gen)
				ls.valid = false
			} else if hostSeen[hk] {
				conflicted = cond(string(gwv1.ListenerConditionConflicted), true, string(gwv1.ListenerReasonHostnameConflict),
					fmt.Sprintf("another listener on port %d has the same hostname", l.Port), gen)
				ls.valid = false
			}
			if conflicted.Status == metav1.ConditionTrue {
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, conflicted.Reason, conflicted.Message, gen)
			} else {
				if _, ok := portProto[l.Port]; !ok || isL4(l.Protocol) {
					portProto[l.Port] = l.Protocol
				}
				hostSeen[hk] = true
			}
		}
		ls.attachable = ls.valid
		if ls.valid && (l.Protocol == gwv1.HTTPSProtocolType || l.Protocol == gwv1.TLSProtocolType && ls.terminates()) {
			reason, msg, missing := ls.resolveCertificates(w)
			r.missingSecrets = r.missingSecrets || missing
			if reason != "" {
				resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, reason, msg, gen)
				ls.valid = false
			}
		}
		if v := frontendValidation(gw, l.Port); ls.valid && l.Protocol == gwv1.HTTPSProtocolType && v != nil {
			out := resolveClientValidation(v, w)
			r.missingSecrets = r.missingSecrets || out.missing
			if out.reason != "" {
				resolved = cond(string(gwv1.ListenerConditionResolvedRefs), false, out.reason, out.message, gen)
			}
			if out.validation == nil {
				// No authority to check clients against: the port is
				// not served rather than served unchecked.
				accepted = cond(string(gwv1.ListenerConditionAccepted), false, string(gwv1.ListenerReasonNoValidCACertificate), out.message, gen)
				ls.valid = false
			}
			ls.clientValidation = out.validation
		}
		programmed := cond(string(gwv1.ListenerConditionProgrammed), ls.valid, string(gwv1.ListenerReasonProgrammed), "", gen)
		switch {
		case conflicted.Status == metav1.ConditionTrue:
			programmed.Reason, programmed.Message = conflicted.Reason, conflicted.Message
		case !ls.valid:
			programmed.Reason = string(gwv1.ListenerReasonInvalid)
			programmed.Message = "the listener is not valid; see its other conditions"
		}
		ls.status.Conditions = []metav1.Condition{accepted, resolved, conflicted, programmed}
		listeners = append(listeners, ls)
	}

	attachRoutes(w, listeners, sets, r)

	// Ports: one per port and protocol, listeners of a port merged.
	type portBuild struct {
		port  dataplane.Port
		hosts map[string][]ruleEntry
	}
	byPort := map[string]*portBuild{}
	var order []string
	portKey := func(ls *listenerState) string {
		return fmt.Sprintf("%d/%s", ls.spec.Port, dataplaneProtocol(ls.spec.Protocol))
	}
	// Listener isolation: a request belongs to the most specific listener
	// of its port whose hostname matches it, and only that listener's
	// routes serve it. Every listener hostname is a virtual host (an
	// empty one answers 404), and a route's hostname that a more specific
	// listener of the port covers is left out of the less specific one's.
	hostnamesOf := map[string][]string{}
	for _, ls := range listeners {
		if ls.valid {
			hostnamesOf[portKey(ls)] = append(hostnamesOf[portKey(ls)], ls.hostname)
		}
	}
	for _, ls := range listeners {
		if ls.set == nil {
			ls.status.AttachedRoutes = ls.attached
			r.listeners = append(r.listeners, ls.status)
		}
		if !ls.valid {
			continue
		}
		proto := dataplaneProtocol(ls.spec.Protocol)
		k := portKey(ls)
		pb, ok := byPort[k]
		if !ok {
			pb = &portBuild{port: dataplane.Port{Port: ls.spec.Port, Protocol: proto}, hosts: map[string][]ruleEntry{}}
			byPort[k] = pb
			order = append(order, k)
		}
		pb.port.Certificates = append(pb.port.Certificates, ls.certs...)
		if ls.clientValidation != nil {
			pb.port.ClientValidation = ls.clientValidation
		}
		pb.port.Backends = append(pb.port.Backends, ls.l4backends...)
		for _, h := range ls.tlsHosts {
			// As HTTP: a server name a more specific listener of the
			// port takes is that listener's, and a name two listeners
			// give goes to the first.
			if isolatedFrom(ls.hostname, h.Hostname, hostnamesOf[k]) ||
				slices.ContainsFunc(pb.port.TLSHosts, func(o dataplane.TLSHost) bool { return o.Hostname == h.Hostname }) {
				continue
			}
			pb.port.TLSHosts = append(pb.port.TLSHosts, h)
		}
		if ls.hostname != "" && (proto == dataplane.HTTP || proto == dataplane.HTTPS) {
			if _, ok := pb.hosts[ls.hostname]; !ok {
				pb.hosts[ls.hostname] = nil
			}
		}
		for host, entries := range ls.hosts {
			if isolatedFrom(ls.hostname, host, hostnamesOf[k]) {
				continue
			}
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
		slices.SortFunc(p.TLSHosts, func(a, b dataplane.TLSHost) int { return strings.Compare(a.Hostname, b.Hostname) })
		r.config.Ports = append(r.config.Ports, p)
		sp := corev1.ServicePort{Name: strings.ToLower(fmt.Sprintf("%s-%d", p.Protocol, p.Port)), Port: p.Port, TargetPort: intstr.FromInt32(p.Port), Protocol: corev1.ProtocolTCP}
		if p.Protocol == dataplane.UDP {
			sp.Protocol = corev1.ProtocolUDP
		}
		r.ports = append(r.ports, sp)
	}

	for _, s := range sets {
		sr := compileSet(s)
		r.setCertificates = r.setCertificates || sr.attached() && slices.ContainsFunc(s.listeners, func(ls *listenerState) bool { return ls.spec.Protocol == gwv1.HTTPSProtocolType })
		r.sets = append(r.sets, sr)
		if sr.attached() {
			r.attachedSets++
		}
	}
	// The Gateway's conditions are its own listeners'.
	valid, own := 0, 0
	for _, ls := range listeners {
		if ls.set == nil {
			own++
			if ls.valid {
				valid++
			}
		}
	}
	switch {
	case own > 0 && valid == 0:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid), "no listener is valid", gen)
	case invalidParams != "":
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonInvalidParameters), invalidParams, gen)
	case addressUnsupported(gw) != "":
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress), addressUnsupported(gw), gen)
	case valid < own:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonListenersNotValid), "some listeners are not valid", gen)
	default:
		r.accepted = cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "", gen)
	}
	if r.accepted.Status == metav1.ConditionFalse {
		// A Gateway not accepted takes no ListenerSet.
		r.attachedSets = 0
		for i := range r.sets {
			if r.sets[i].attached() {
				r.sets[i].accepted = cond(string(gwv1.ListenerSetConditionAccepted), false, string(gwv1.ListenerSetReasonParentNotAccepted),
					"Gateway not accepted: "+r.accepted.Message, r.sets[i].accepted.ObservedGeneration)
			}
		}
	}
	r.insecureFrontend = insecureFrontend(gw)
	bc := resolveBackendClient(w)
	r.config.BackendClientCertificate = bc.cert
	r.missingSecrets = r.missingSecrets || bc.missing
	r.backendClient = backendClientRef(gw) != nil
	r.resolvedRefs = gatewayResolvedRefs(r.listeners, bc, gen)
	return r
}

func isL4(p gwv1.ProtocolType) bool {
	return p == gwv1.TCPProtocolType || p == gwv1.UDPProtocolType
}

func dataplaneProtocol(p gwv1.ProtocolType) dataplane.Protocol {
	return dataplane.Protocol(p)
}

// addressUnsupported says why spec.addresses are not of a kind Outrigger
// takes, or "": IP addresses only (one honoured, requestedAddresses).
func addressUnsupported(gw *gwv1.Gateway) string {
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

// requestedAddresses are the addresses spec.addresses asks for by value
// (an IPAddress without value asks for any, GatewayAddressEmpty). A
// provider's load balancer takes one (the Service's loadBalancerIP, as
// clouds take a reserved address): more than one cannot all be assigned,
// so none is requested and the Gateway is not Programmed (AddressNotUsable).
func requestedAddresses(gw *gwv1.Gateway) []string {
	var out []string
	for _, a := range gw.Spec.Addresses {
		if a.Value != "" {
			out = append(out, a.Value)
		}
	}
	return out
}

// allowedKinds is the listener's supported kinds and whether every kind it
// asks for is one of them.
func allowedKinds(l gwv1.Listener, kinds []*routeKind) ([]gwv1.RouteGroupKind, bool) {
	served := routeKinds(l.Protocol, kinds)
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
// is a ResolvedRefs reason and message, and missing says a Secret named
// does not exist (yet).
func (ls *listenerState) resolveCertificates(w *world) (reason, msg string, missing bool) {
	tlsc := ls.spec.TLS
	if tlsc == nil || len(tlsc.CertificateRefs) == 0 {
		if ls.spec.Protocol == gwv1.TLSProtocolType {
			return string(gwv1.ListenerReasonInvalidCertificateRef), "a TLS listener of mode Terminate needs tls.certificateRefs", false
		}
		return string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs", false
	}
	if tlsc.Mode != nil && *tlsc.Mode != gwv1.TLSModeTerminate {
		return string(gwv1.ListenerReasonInvalidCertificateRef), "HTTPS listeners terminate TLS; Passthrough is not served", false
	}
	from, fromKind := ls.namespace(w.gateway)
	for _, ref := range tlsc.CertificateRefs {
		if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != kindSecret) {
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("certificateRef %s is not a Secret", ref.Name), false
		}
		ns := from
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != from && !granted(w.grants, groupGateway, fromKind, from, "", kindSecret, ns, string(ref.Name)) {
			return string(gwv1.ListenerReasonRefNotPermitted), fmt.Sprintf("no ReferenceGrant in %s allows Secret %s", ns, ref.Name), false
		}
		s, ok := w.secrets[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
		if !ok {
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("Secret %s/%s not found", ns, ref.Name), true
		}
		certPEM, keyPEM := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			return string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("Secret %s/%s holds no valid certificate and key: %v", ns, ref.Name, err), false
		}
		ls.certs = append(ls.certs, dataplane.Certificate{Hostname: ls.hostname, CertPEM: certPEM, KeyPEM: keyPEM})
	}
	return "", "", false
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

// isolatedFrom says whether a more specific listener of the port than
// listener (its hostname) takes every request for host: then the route
// that gave host through listener serves none of them.
func isolatedFrom(listener, host string, portHostnames []string) bool {
	for _, other := range portHostnames {
		if other != listener && moreSpecific(other, listener) && covers(other, host) {
			return true
		}
	}
	return false
}

// moreSpecific says whether listener hostname a takes precedence over b for
// the hosts both match: any hostname over none, an exact name over a
// wildcard, a longer wildcard over a shorter one.
func moreSpecific(a, b string) bool {
	switch {
	case b == "":
		return a != ""
	case a == "" || !strings.HasPrefix(b, "*."):
		return false
	case !strings.HasPrefix(a, "*."):
		return hostMatches(b, a)
	}
	return len(a) > len(b) && strings.HasSuffix(a, b[1:])
}

// covers says whether every host that host (an exact name or a wildcard)
// stands for is matched by listener hostname l.
func covers(l, host string) bool {
	switch {
	case l == "" || l == host:
		return true
	case !strings.HasPrefix(l, "*."):
		return false
	}
	return strings.HasSuffix(host, l[1:]) && len(host) > len(l)-1
}
