// Package gateway serves the Gateway API through the cluster's provider:
// for every Gateway of a class naming Outrigger's controller it compiles
// the listeners and attached routes (HTTPRoute, GRPCRoute, TCPRoute,
// UDPRoute) into
// the programming of a data plane (package gateway/dataplane), kept in a
// Secret beside the Gateway, and fronts that data plane with a Service of
// type LoadBalancer, which the provider serves through its ordinary
// LoadBalancer calls like any other. Statuses (GatewayClass, Gateway,
// listeners, route parents) carry the conditions and reasons the
// specification names.
package gateway
