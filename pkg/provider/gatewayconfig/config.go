// Package gatewayconfig is what a Gateway serves, compiled by Outrigger's
// gateway controller from the Gateway API objects: ports with their
// protocols and certificates, virtual hosts with rules in precedence order,
// and weighted backends. Outrigger's own data plane is programmed with it,
// and a provider whose cloud serves Gateways with its own layer-7 load
// balancers (provider.Gateways) is handed it, so that a provider's tests
// can build one. Every decision that needs the API (which routes attach,
// which backends resolve, in what order rules take precedence) is already
// made.
package gatewayconfig

import (
	"encoding/json"
	"fmt"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Protocol is a listener's protocol.
type Protocol string

// The protocols served.
const (
	HTTP  Protocol = "HTTP"
	HTTPS Protocol = "HTTPS"
	TCP   Protocol = "TCP"
	UDP   Protocol = "UDP"
	// TLS is a port of TLSRoutes: the client's server name (SNI) picks
	// the route, which passes the TLS stream through untouched or
	// terminates it (TLSHost.Terminate).
	TLS Protocol = "TLS"
)

// Config is everything one Gateway serves. It travels as its JSON
// encoding: in the Secret Outrigger's data plane reads, and to plugins.
type Config struct {
	// Gateway is namespace/name, for logs.
	Gateway string `json:"gateway"`
	// Generation is the Gateway's generation the config was compiled from.
	Generation int64  `json:"generation"`
	Ports      []Port `json:"ports,omitempty"`
	// Settings are those the Gateway's or its class's parametersRef gives
	// (docs/gateway.md, "Settings"); nil, or a zero field, is the
	// default.
	Settings *Settings `json:"settings,omitempty"`
	// BackendClientCertificate is the certificate and key (PEM; Hostname
	// unused) presented to every backend reached over TLS (BackendTLS)
	// that asks for a client certificate: the Gateway's
	// spec.tls.backend.clientCertificateRef. nil presents none.
	BackendClientCertificate *Certificate `json:"backendClientCertificate,omitempty"`
}

// Settings tune how a Gateway serves: its edge timeouts, how far it
// trusts a client's X-Forwarded-For, and whether its load balancer
// speaks the PROXY protocol. The durations travel as nanoseconds;
// zero is the server's default.
type Settings struct {
	// RequestHeaderTimeout: a connection has this long to send a
	// request's headers (a TLS client its ClientHello).
	RequestHeaderTimeout time.Duration `json:"requestHeaderTimeout,omitempty"`
	// IdleTimeout: a keep-alive connection with no request in flight is
	// closed after this.
	IdleTimeout time.Duration `json:"idleTimeout,omitempty"`
	// StreamIdleTimeout: a request that moves no byte either way for this
	// long ends.
	StreamIdleTimeout time.Duration `json:"streamIdleTimeout,omitempty"`
	// TCPIdleTimeout: a TCP (or routed TLS) connection that moves no byte
	// either way for this long is closed.
	TCPIdleTimeout time.Duration `json:"tcpIdleTimeout,omitempty"`
	// TrustedHops is how many proxies in front of the Gateway (beyond the
	// cloud's load balancer, which adds no header) append to
	// X-Forwarded-For: 0 trusts nothing a client sends.
	TrustedHops int `json:"trustedHops,omitempty"`
	// ProxyProtocol: the cloud's load balancer sends a PROXY protocol
	// header (HAProxy's, version 1 or 2) at the start of every TCP
	// connection, and its source address is the client's. Every
	// connection of the Gateway's HTTP, HTTPS, TLS and TCP ports must
	// then carry one (a version 2 LOCAL header, a load balancer's
	// health check, keeps the connection's own address); one without is
	// closed. UDP ports are unaffected. A provider's own load balancer
	// (provider.Gateways) terminates the client's connection itself and
	// has no use for it.
	ProxyProtocol bool `json:"proxyProtocol,omitempty"`
	// AccessLog is the share of HTTP requests the data plane writes an
	// access log line for (JSON, on its standard output): 0 none, 1
	// every one, 0.01 about one in a hundred, each request drawn at
	// random. A provider's own load balancer logs as its cloud does.
	AccessLog float64 `json:"accessLog,omitempty"`
}

// Port is one listening port; several Gateway listeners (HTTPS hostnames,
// say) may share it.
type Port struct {
	Port     int32    `json:"port"`
	Protocol Protocol `json:"protocol"`
	// Certificates serve HTTPS, and a TLS port's terminated hosts, by SNI: the most specific Hostname that
	// matches the client's server name, "" for any.
	Certificates []Certificate `json:"certificates,omitempty"`
	// Hosts are the HTTP virtual hosts, by effective hostname.
	Hosts []VirtualHost `json:"hosts,omitempty"`
	// Backends serve a TCP or UDP port.
	Backends []Backend `json:"backends,omitempty"`
	// TLSHosts serve a TLS port, by the client's server name.
	TLSHosts []TLSHost `json:"tlsHosts,omitempty"`
	// ClientValidation, on an HTTPS port, asks each client for a
	// certificate and checks it (the Gateway's spec.tls.frontend for the
	// port); nil asks for none.
	ClientValidation *ClientValidation `json:"clientValidation,omitempty"`
}

// ClientValidation is how an HTTPS port checks its clients' certificates.
type ClientValidation struct {
	// CAPEM are the certificate authorities a client's certificate must
	// chain to, PEM.
	CAPEM []byte `json:"caPEM"`
	// InsecureFallback serves a client without a certificate, or with one
	// that does not chain to CAPEM, too (AllowInsecureFallback): the
	// backend decides.
	InsecureFallback bool `json:"insecureFallback,omitempty"`
}

// TLSHost is the TLSRoute that serves one server name of a TLS port ("" a
// client that sends none or any name, "*.x" a wildcard): the exact name
// first, then the longest wildcard, then "".
type TLSHost struct {
	Hostname string `json:"hostname,omitempty"`
	// Route is namespace/name of the TLSRoute, for logs.
	Route string `json:"route"`
	// Terminate: TLS ends at the data plane, with the port's certificate
	// for the server name (Certificates), and the backends are sent the
	// decrypted stream. Otherwise the stream passes through as the client
	// sent it, its ClientHello included, and the backend terminates it.
	Terminate bool      `json:"terminate,omitempty"`
	Backends  []Backend `json:"backends,omitempty"`
}

// Certificate is a TLS certificate chain and key in PEM.
type Certificate struct {
	Hostname string `json:"hostname,omitempty"`
	CertPEM  []byte `json:"certPEM"`
	KeyPEM   []byte `json:"keyPEM"`
}

// VirtualHost is the rules for one hostname ("" any host, "*.x" a
// wildcard), in precedence order: the first whose match holds serves.
type VirtualHost struct {
	Hostname string `json:"hostname,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is one match of an HTTPRoute or GRPCRoute rule with what the rule
// does.
type Rule struct {
	// Route is namespace/name of the HTTPRoute, for logs.
	Route    string                 `json:"route"`
	Match    gwv1.HTTPRouteMatch    `json:"match"`
	Filters  []gwv1.HTTPRouteFilter `json:"filters,omitempty"`
	Backends []Backend              `json:"backends,omitempty"`
	// GRPC: the rule is a GRPCRoute's (its match is the path and headers
	// of the calls it takes); its errors are answered as gRPC statuses.
	GRPC bool `json:"grpc,omitempty"`
	// Timeouts are an HTTPRoute rule's request and backend request
	// timeouts; an expired one is answered 504.
	Timeouts *gwv1.HTTPRouteTimeouts `json:"timeouts,omitempty"`
	// Retry is an HTTPRoute rule's retry stanza (experimental channel):
	// a request answered with one of its codes, whose backend cannot be
	// reached, or whose attempt runs out the backendRequest timeout is
	// sent again, up to its attempts.
	Retry *gwv1.HTTPRouteRetry `json:"retry,omitempty"`
	// Mirrors are the rule's RequestMirror filters with their backendRefs
	// resolved (the filters themselves stay in Filters): each is sent a
	// copy of a share of the rule's requests, and its answers are
	// ignored. A mirror whose backendRef did not resolve is left out.
	Mirrors []Mirror `json:"mirrors,omitempty"`
}

// Mirror is where a RequestMirror filter sends its copies, and which
// share of the requests: Numerator out of every Denominator. A zero
// Denominator (both omitted) is every request; a zero Numerator under a
// Denominator is none.
type Mirror struct {
	Address string `json:"address"`
	// Service is the Service the address belongs to, as a Backend's.
	Service *ServicePort `json:"service,omitempty"`
	// H2C: the mirror speaks HTTP/2 in cleartext, as a Backend's.
	H2C         bool  `json:"h2c,omitempty"`
	Numerator   int32 `json:"numerator,omitempty"`
	Denominator int32 `json:"denominator,omitempty"`
}

// Backend is one destination with its weight. An Invalid one (not found,
// not permitted by a ReferenceGrant) answers 500 for its share, as the
// specification asks.
type Backend struct {
	Address string `json:"address,omitempty"`
	// Service is the Service the address belongs to: the proxy needs only
	// the address; a cloud's own load balancer (provider.Gateways) may
	// resolve the Service to what it reaches instead.
	Service *ServicePort `json:"service,omitempty"`
	Weight  int32        `json:"weight"`
	Invalid bool         `json:"invalid,omitempty"`
	// H2C: the backend speaks HTTP/2 in cleartext with prior knowledge
	// (gRPC, a Service port of appProtocol kubernetes.io/h2c).
	H2C bool `json:"h2c,omitempty"`
	// Filters apply to requests sent to this backend only.
	Filters []gwv1.HTTPRouteFilter `json:"filters,omitempty"`
	// Mirrors are the RequestMirror filters of Filters, resolved as a
	// Rule's Mirrors: they copy the requests sent to this backend.
	Mirrors []Mirror `json:"mirrors,omitempty"`
	// TLS: the backend is reached over TLS, as the BackendTLSPolicy of
	// its Service port asks; nil is plain HTTP (or h2c).
	TLS *BackendTLS `json:"tls,omitempty"`
}

// BackendTLS is how the data plane connects to a backend over TLS and
// verifies its certificate (a BackendTLSPolicy's validation).
type BackendTLS struct {
	// CAPEM are the certificate authorities (PEM) the backend's chain must
	// lead to; empty with WellKnownSystem.
	CAPEM []byte `json:"caPEM,omitempty"`
	// WellKnownSystem verifies the chain against the data plane's system
	// certificate authorities instead of CAPEM.
	WellKnownSystem bool `json:"wellKnownSystem,omitempty"`
	// Hostname is the server name sent (SNI) and, without
	// SubjectAltNames, the name the certificate must be valid for.
	Hostname string `json:"hostname"`
	// SubjectAltNames, when given, replace Hostname in verifying the
	// certificate: it must hold one of them (a DNS name, wildcards as in
	// hostname verification, or a URI, exactly).
	SubjectAltNames []gwv1.SubjectAltName `json:"subjectAltNames,omitempty"`
}

// ServicePort is a port of a Service.
type ServicePort struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Port      int32  `json:"port"`
}

// Marshal encodes a config.
func (c *Config) Marshal() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding data plane config: %w", err)
	}
	return b, nil
}

// Unmarshal decodes a config.
func Unmarshal(data []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("decoding data plane config: %w", err)
	}
	return &c, nil
}
