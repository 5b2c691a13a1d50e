// Package dataplane is the proxy that serves a Gateway's listeners: HTTP
// and HTTPS routing by host, path, headers, query and method with the
// standard filters (HTTP/1.1 and HTTP/2, gRPC included, in cleartext and
// over TLS), TLS routed by the ClientHello's server name (passed through,
// or terminated: tls.go), and TCP and UDP forwarding, to weighted
// backends.
//
// It is programmed with a Config the gateway controller compiles from the
// Gateway API objects: every decision that needs the API (which routes
// attach, which backends resolve, in what order rules take precedence) is
// made there, so the hot path reads only memory.
package dataplane

import "github.com/outrigger-ccm/outrigger/pkg/provider/gatewayconfig"

// The configuration's types are the contract's (pkg/provider/gatewayconfig):
// a provider serving Gateways on its cloud's own load balancers is handed
// the same Config. The names here keep the data plane's code short.
type (
	Protocol    = gatewayconfig.Protocol
	Config      = gatewayconfig.Config
	Port        = gatewayconfig.Port
	Certificate = gatewayconfig.Certificate
	VirtualHost = gatewayconfig.VirtualHost
	Rule        = gatewayconfig.Rule
	Backend     = gatewayconfig.Backend
	BackendTLS  = gatewayconfig.BackendTLS
	ServicePort = gatewayconfig.ServicePort
	TLSHost     = gatewayconfig.TLSHost
	// ClientValidation is an HTTPS port's check of client certificates.
	ClientValidation = gatewayconfig.ClientValidation
	Mirror           = gatewayconfig.Mirror
)

// The protocols served.
const (
	HTTP  = gatewayconfig.HTTP
	HTTPS = gatewayconfig.HTTPS
	TCP   = gatewayconfig.TCP
	UDP   = gatewayconfig.UDP
	TLS   = gatewayconfig.TLS
)

// Unmarshal decodes a config.
func Unmarshal(data []byte) (*Config, error) { return gatewayconfig.Unmarshal(data) }
