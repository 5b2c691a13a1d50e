// Package gateway serves the Gateway API through the cluster's provider:
// for every Gateway of a class naming Outrigger's controller it compiles
// the listeners and attached routes (HTTPRoute, GRPCRoute, TCPRoute,
// UDPRoute, TLSRoute) into the programming of a data plane (package
// gateway/dataplane), and has it served in one of two ways: kept in a
// Secret beside the Gateway and served by Outrigger's data plane behind a
// Service of type LoadBalancer, which the provider serves through its
// ordinary LoadBalancer calls like any other; or handed to the provider's
// own layer-7 load balancers (provider.Gateways). Statuses (GatewayClass,
// Gateway, listeners, route parents) carry the conditions and reasons the
// specification names.
//
// The files follow the reconcile, one job each:
//
//   - controller.go: Name, Options, Setup and Reconcile, which reads the
//     Gateway, gathers, compiles, has it served and writes statuses.
//   - watch.go: what is watched, and the mappers from a route, Service,
//     class, ReferenceGrant or namespace to the Gateways it concerns.
//   - gather.go: the world one Gateway compiles from, read from the cache
//     (certificates from the API: no Secret is cached).
//   - compile.go, attach.go, backends.go: compile, a pure function of the
//     world (it returns everything and changes nothing): listeners and
//     their conditions, routes attached to listeners by section, port,
//     kind, namespace and hostname, rules with their backends in
//     precedence order. Golden files in testdata/ pin what it returns.
//   - serving.go: serving, the one interface of the two ways of serving,
//     chosen once in Setup; dataPlaneServing is the data plane, and
//     build.go makes its Secret, Service and Deployment (refused.go keeps
//     what the provider refused of the Service); cloud.go is
//     cloudServing, the provider's own load balancers.
//   - status.go: the Gateway's and the routes' statuses.
//   - routes.go: the table of route kinds; everything that differs between
//     kinds is there. grpc.go: a GRPCRoute rule as the HTTPRoute rule the
//     data plane serves.
//   - class.go: the GatewayClass controller and its supported features.
package gateway
