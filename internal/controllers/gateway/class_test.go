package gateway

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// featureCloud is a provider's load balancers serving only the features
// named; no load balancer is ever made.
type featureCloud struct {
	provider.GatewayLoadBalancer
	features []string
}

func (c featureCloud) GatewayFeatures() []string { return c.features }

// TestClassFeatures: a class states what Outrigger compiles (GRPCRoute's,
// TLSRoute's and BackendTLSPolicy's features only where those kinds are served) and what serves it serves:
// the data plane all of it, a provider's own load balancers what they
// name.
func TestClassFeatures(t *testing.T) {
	all := classFeatures(Options{GRPCRoute: true, TLSRoute: true, BackendTLSPolicy: true, ListenerSet: true, ProviderName: "local"}, &dataPlaneServing{})
	if !slices.Equal(all, SupportedFeatures) {
		t.Errorf("data plane with GRPCRoute, TLSRoute, BackendTLSPolicy and ListenerSet: %v, want SupportedFeatures", all)
	}
	// Static addresses only where the provider's load balancers honour
	// or refuse a requested address.
	if slices.Contains(classFeatures(Options{GRPCRoute: true, TLSRoute: true, ProviderName: "aws"}, &dataPlaneServing{}), features.SupportGatewayStaticAddresses) {
		t.Error("a provider that may ignore spec.loadBalancerIP states GatewayStaticAddresses")
	}
	if !slices.Contains(all, features.SupportGatewayBackendClientCertificate) {
		t.Errorf("BackendTLSPolicy served, the class does not state GatewayBackendClientCertificate: %v", all)
	}
	if !slices.Contains(all, features.SupportTLSRoute) {
		t.Errorf("TLSRoute served, the class does not state it: %v", all)
	}
	for _, f := range classFeatures(Options{}, &dataPlaneServing{}) {
		if strings.HasPrefix(string(f), "GRPCRoute") || strings.HasPrefix(string(f), "TLSRoute") || strings.HasPrefix(string(f), "BackendTLSPolicy") ||
			f == features.SupportGatewayBackendClientCertificate || f == features.SupportListenerSet {
			t.Errorf("without GRPCRoute, TLSRoute, BackendTLSPolicy and ListenerSet served, the class states %s", f)
		}
	}
	// The retry features only where the HTTPRoute CRD keeps the field.
	if slices.Contains(all, features.SupportHTTPRouteRetry) {
		t.Error("without rules[].retry served, the class states HTTPRouteRetry")
	}
	withRetry := classFeatures(Options{HTTPRouteRetry: true, ProviderName: "local"}, &dataPlaneServing{})
	for _, f := range RetryFeatures {
		if !slices.Contains(withRetry, f) {
			t.Errorf("with rules[].retry served, the class does not state %s: %v", f, withRetry)
		}
	}
	cloud := &cloudServing{lb: featureCloud{features: []string{string(features.SupportGateway), string(features.SupportHTTPRoute), "SomethingElse"}}}
	if got := classFeatures(Options{GRPCRoute: true}, cloud); !slices.Equal(got, []features.FeatureName{features.SupportGateway, features.SupportHTTPRoute}) {
		t.Errorf("a cloud serving Gateway and HTTPRoute: %v, want those two", got)
	}
}
