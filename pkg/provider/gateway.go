package provider

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/outrigger-ccm/outrigger/pkg/provider/gatewayconfig"
)

// Gateways is an optional interface for a provider (the
// cloudprovider.Interface value): its cloud's own layer-7 load balancers
// serve Gateways. Like LoadBalancer() in k8s.io/cloud-provider, it answers
// at run time whether the provider offers it (a plugin says so in its
// capabilities).
//
// Without it (or when it answers false), Outrigger serves every Gateway
// with a data plane it runs itself (a Deployment of its proxy) behind an
// ordinary load balancer made with the provider's LoadBalancer calls. With
// it, Outrigger runs no data plane and no load balancer Service for the
// Gateways of this provider: it compiles each Gateway with its routes, as
// it would for its own proxy, and hands the result to
// EnsureGatewayLoadBalancer.
type Gateways interface {
	GatewayLoadBalancer() (GatewayLoadBalancer, bool)
}

// GatewayLoadBalancer programs the cloud's layer-7 load balancer of one
// Gateway. Outrigger calls it through its cloud-call layer (the
// loadbalancers family: the same limits, metrics, deadlines and retries
// as EnsureLoadBalancer).
type GatewayLoadBalancer interface {
	// GatewayFeatures are the Gateway API features its load balancers
	// serve, by name (sigs.k8s.io/gateway-api/pkg/features: "Gateway",
	// "HTTPRoute", "HTTPRouteQueryParamMatching", ...). The GatewayClass
	// states those of them Outrigger compiles; a route using another
	// still reaches the provider, which refuses it with ReasonInvalidSpec.
	GatewayFeatures() []string
	// EnsureGatewayLoadBalancer creates or updates the load balancer of
	// gateway to serve gateway.Config, and returns its status: the
	// addresses become the Gateway's status.addresses. It is called again
	// whenever the Gateway, a route, a backend Service, a certificate or a
	// ReferenceGrant changes, and must be idempotent. The load balancer
	// records in the cloud (its tags or name) the cluster name, the
	// cluster's identity and the Gateway's UID, and the provider changes
	// only a load balancer whose record names them all.
	EnsureGatewayLoadBalancer(ctx context.Context, clusterName string, gateway *Gateway) (*corev1.LoadBalancerStatus, error)
	// EnsureGatewayLoadBalancerDeleted deletes the load balancer of gateway
	// if it exists and its record names this cluster and the Gateway's
	// UID; nil when there is none.
	EnsureGatewayLoadBalancerDeleted(ctx context.Context, clusterName string, gateway *Gateway) error
}

// Gateway is one Gateway as a cloud's layer-7 load balancer serves it. It
// travels to plugins as its JSON encoding.
type Gateway struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// ClusterID is the cluster's identity (see ClusterIdentity), recorded
	// with the load balancer beside the cluster name.
	ClusterID string `json:"clusterID,omitempty"`
	// Class is the load balancer class of the Outrigger serving it ("" the
	// default), as a Service's spec.loadBalancerClass.
	Class string `json:"class,omitempty"`
	// Addresses are the IP addresses the Gateway asks for
	// (spec.addresses); a provider that cannot give one returns an error
	// with ReasonInvalidSpec.
	Addresses []string `json:"addresses,omitempty"`
	// Annotations are spec.infrastructure.annotations: a provider's load
	// balancer options, as a Service's annotations are.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Config is what to serve: one entry per port with its protocol, its
	// certificates, virtual hosts and rules in precedence order, and
	// backends. Each backend names its Service (Backend.Service) with the
	// Service's cluster address; a cloud that reaches pods directly
	// resolves the Service's EndpointSlices itself. Every decision that
	// needs the API (which routes attach, which references resolve) is
	// already made: the provider programs what it is given.
	Config *gatewayconfig.Config `json:"config"`
}

// NamespacedName is the Gateway's namespace/name.
func (g *Gateway) NamespacedName() types.NamespacedName {
	return types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
}
