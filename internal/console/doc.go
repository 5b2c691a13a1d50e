// Package console is Outrigger's web console: one page that shows the
// LoadBalancer Services with their VIPs, backends and why a pending one is
// pending, the Gateways of every class with their addresses, listeners,
// routes and why one is not programmed (and, for Outrigger's, their data
// planes' traffic), the IP pools and node CIDRs with
// their usage, the nodes' cloud state, the cloud-call layer's rates,
// latencies, throttles and limits as charts, and a timeline of what the
// controllers did, all kept current over server-sent events.
//
// It reads only what any cluster has (Services, Nodes, EndpointSlices and
// Events through informers; the Gateway API's GatewayClasses, Gateways,
// HTTPRoutes, GRPCRoutes, TCPRoutes, UDPRoutes and TLSRoutes too where discovery says
// they are served; the outrigger_cloud_* metrics from a Prometheus gatherer;
// Outrigger's Gateway data plane pods' /metrics through the API server's
// pod proxy, where RBAC allows), so it
// works for every provider; a provider can add its own address ranges
// through RangeSource. It is read-only unless given Actions
// (the sim cloud's, in `outrigger dev --console-actions`). In tenant mode
// it shows the tenants (Options.Tenants), and without a Client only them
// and the calls. The page and its script are embedded: nothing is fetched
// from elsewhere at run time.
package console
