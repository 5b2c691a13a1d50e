package gateway

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// routeKind is everything that differs between the route kinds served:
// watching, gathering, compiling and writing statuses read a route only
// through it, so a new kind is one entry of routeKindTable.
type routeKind struct {
	// name is the kind, as in RouteGroupKind and routeKey.
	name string
	// protocols are the listener protocols whose listeners serve the kind.
	protocols []gwv1.ProtocolType
	// optional: served only with its Options field (Options.GRPCRoute,
	// Options.TLSRoute): their CRDs joined the standard channel later
	// than the others (v1.1, v1.5), and clusters without them exist.
	optional func(kindOptions) bool
	// object is an empty route of the kind, for watches.
	object func() client.Object
	// list is an empty list of the kind, and items its routes.
	list  func() client.ObjectList
	items func(client.ObjectList) []client.Object
	// parentRefs are the Gateways the route names; parentStatuses its
	// status.parents, which writing a status sets through the pointer.
	parentRefs     func(client.Object) []gwv1.ParentReference
	parentStatuses func(client.Object) *[]gwv1.RouteParentStatus
	// hostnames are the route's hostnames (nil for TCP and UDP routes).
	hostnames func(client.Object) []gwv1.Hostname
	// sni: a layer-4 route whose hostnames are server names (TLSRoute):
	// each hostname attached is a TLS host of the listener's port, which
	// the client's server name picks.
	sni bool
	// httpRules are a layer-7 route's rules as HTTPRoute rules, with the
	// GRPCRoute rules they were made from (nil for an HTTPRoute): the
	// data plane serves both alike. Nil for layer-4 kinds.
	httpRules func(client.Object) ([]gwv1.HTTPRouteRule, []gwv1.GRPCRouteRule)
	// l4Backends are a layer-4 route's backends, carried over transport.
	l4Backends func(client.Object) []gwv1.BackendRef
	transport  corev1.Protocol
}

// routeKindTable is every route kind Outrigger serves, in the order their
// routes are gathered, compiled and listed in SupportedKinds.
var routeKindTable = []*routeKind{
	{
		name:      kindHTTPRoute,
		protocols: []gwv1.ProtocolType{gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType},
		object:    func() client.Object { return &gwv1.HTTPRoute{} },
		list:      func() client.ObjectList { return &gwv1.HTTPRouteList{} },
		items:     func(l client.ObjectList) []client.Object { return objects(l.(*gwv1.HTTPRouteList).Items) },
		parentRefs: func(o client.Object) []gwv1.ParentReference {
			return o.(*gwv1.HTTPRoute).Spec.ParentRefs
		},
		parentStatuses: func(o client.Object) *[]gwv1.RouteParentStatus {
			return &o.(*gwv1.HTTPRoute).Status.Parents
		},
		hostnames: func(o client.Object) []gwv1.Hostname { return o.(*gwv1.HTTPRoute).Spec.Hostnames },
		httpRules: func(o client.Object) ([]gwv1.HTTPRouteRule, []gwv1.GRPCRouteRule) {
			return o.(*gwv1.HTTPRoute).Spec.Rules, nil
		},
	},
	{
		name:      kindGRPCRoute,
		protocols: []gwv1.ProtocolType{gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType},
		optional:  func(o kindOptions) bool { return o.grpc },
		object:    func() client.Object { return &gwv1.GRPCRoute{} },
		list:      func() client.ObjectList { return &gwv1.GRPCRouteList{} },
		items:     func(l client.ObjectList) []client.Object { return objects(l.(*gwv1.GRPCRouteList).Items) },
		parentRefs: func(o client.Object) []gwv1.ParentReference {
			return o.(*gwv1.GRPCRoute).Spec.ParentRefs
		},
		parentStatuses: func(o client.Object) *[]gwv1.RouteParentStatus {
			return &o.(*gwv1.GRPCRoute).Status.Parents
		},
		hostnames: func(o client.Object) []gwv1.Hostname { return o.(*gwv1.GRPCRoute).Spec.Hostnames },
		httpRules: func(o client.Object) ([]gwv1.HTTPRouteRule, []gwv1.GRPCRouteRule) {
			grpc := o.(*gwv1.GRPCRoute).Spec.Rules
			rules := make([]gwv1.HTTPRouteRule, 0, len(grpc))
			for _, rule := range grpc {
				rules = append(rules, httpRule(rule))
			}
			return rules, grpc
		},
	},
	{
		name:      kindTCPRoute,
		protocols: []gwv1.ProtocolType{gwv1.TCPProtocolType},
		object:    func() client.Object { return &gwv1.TCPRoute{} },
		list:      func() client.ObjectList { return &gwv1.TCPRouteList{} },
		items:     func(l client.ObjectList) []client.Object { return objects(l.(*gwv1.TCPRouteList).Items) },
		parentRefs: func(o client.Object) []gwv1.ParentReference {
			return o.(*gwv1.TCPRoute).Spec.ParentRefs
		},
		parentStatuses: func(o client.Object) *[]gwv1.RouteParentStatus {
			return &o.(*gwv1.TCPRoute).Status.Parents
		},
		hostnames: func(client.Object) []gwv1.Hostname { return nil },
		l4Backends: func(o client.Object) []gwv1.BackendRef {
			var refs []gwv1.BackendRef
			for _, rule := range o.(*gwv1.TCPRoute).Spec.Rules {
				refs = append(refs, rule.BackendRefs...)
			}
			return refs
		},
		transport: corev1.ProtocolTCP,
	},
	{
		name:      kindUDPRoute,
		protocols: []gwv1.ProtocolType{gwv1.UDPProtocolType},
		object:    func() client.Object { return &gwv1.UDPRoute{} },
		list:      func() client.ObjectList { return &gwv1.UDPRouteList{} },
		items:     func(l client.ObjectList) []client.Object { return objects(l.(*gwv1.UDPRouteList).Items) },
		parentRefs: func(o client.Object) []gwv1.ParentReference {
			return o.(*gwv1.UDPRoute).Spec.ParentRefs
		},
		parentStatuses: func(o client.Object) *[]gwv1.RouteParentStatus {
			return &o.(*gwv1.UDPRoute).Status.Parents
		},
		hostnames: func(client.Object) []gwv1.Hostname { return nil },
		l4Backends: func(o client.Object) []gwv1.BackendRef {
			var refs []gwv1.BackendRef
			for _, rule := range o.(*gwv1.UDPRoute).Spec.Rules {
				refs = append(refs, rule.BackendRefs...)
			}
			return refs
		},
		transport: corev1.ProtocolUDP,
	},
	{
		// A TLS listener serves TLSRoutes whatever its mode: Passthrough
		// sends the TLS stream on, Terminate the decrypted one.
		name:      kindTLSRoute,
		protocols: []gwv1.ProtocolType{gwv1.TLSProtocolType},
		optional:  func(o kindOptions) bool { return o.tls },
		object:    func() client.Object { return &gwv1.TLSRoute{} },
		list:      func() client.ObjectList { return &gwv1.TLSRouteList{} },
		items:     func(l client.ObjectList) []client.Object { return objects(l.(*gwv1.TLSRouteList).Items) },
		parentRefs: func(o client.Object) []gwv1.ParentReference {
			return o.(*gwv1.TLSRoute).Spec.ParentRefs
		},
		parentStatuses: func(o client.Object) *[]gwv1.RouteParentStatus {
			return &o.(*gwv1.TLSRoute).Status.Parents
		},
		hostnames: func(o client.Object) []gwv1.Hostname { return o.(*gwv1.TLSRoute).Spec.Hostnames },
		sni:       true,
		l4Backends: func(o client.Object) []gwv1.BackendRef {
			var refs []gwv1.BackendRef
			for _, rule := range o.(*gwv1.TLSRoute).Spec.Rules {
				refs = append(refs, rule.BackendRefs...)
			}
			return refs
		},
		transport: corev1.ProtocolTCP,
	},
}

// kindOptions are the optional route kinds served.
type kindOptions struct{ grpc, tls bool }

// servedKinds are the route kinds served: every kind, less the optional
// ones not asked for.
func servedKinds(grpc, tls bool) []*routeKind {
	var out []*routeKind
	for _, k := range routeKindTable {
		if k.optional != nil && !k.optional(kindOptions{grpc: grpc, tls: tls}) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// objects are the items of a typed list as client.Objects, pointing into
// the list.
func objects[T any, PT interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// route is one route of a kind served.
type route struct {
	kind *routeKind
	obj  client.Object
}

func (rt route) key() routeKey {
	return routeKey{kind: rt.kind.name, name: client.ObjectKeyFromObject(rt.obj)}
}

func (rt route) name() string {
	return rt.obj.GetNamespace() + "/" + rt.obj.GetName()
}

// layer7 says whether the kind's routes are HTTP's (HTTPRoute, GRPCRoute).
func (k *routeKind) layer7() bool {
	return k.httpRules != nil
}

// backendRefs are the backends a route of the kind names, its rules'
// request mirrors included.
func (k *routeKind) backendRefs(o client.Object) []gwv1.BackendObjectReference {
	var refs []gwv1.BackendObjectReference
	if k.layer7() {
		rules, _ := k.httpRules(o)
		for _, rule := range rules {
			filters := rule.Filters
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
				filters = append(slices.Clip(filters), b.Filters...)
			}
			for _, f := range filters {
				if f.Type == gwv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil {
					refs = append(refs, f.RequestMirror.BackendRef)
				}
			}
		}
		return refs
	}
	for _, b := range k.l4Backends(o) {
		refs = append(refs, b.BackendObjectReference)
	}
	return refs
}
