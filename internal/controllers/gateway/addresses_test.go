package gateway

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// spec.addresses: IP addresses are taken, one of them requested from the
// provider's load balancer; an IPAddress without value asks for none in
// particular; another type refuses the Gateway.
func TestRequestedAddresses(t *testing.T) {
	ip := ptr.To(gwv1.IPAddressType)
	for _, tc := range []struct {
		name        string
		addrs       []gwv1.GatewaySpecAddress
		unsupported bool
		requested   []string
	}{
		{name: "none"},
		{name: "one", addrs: []gwv1.GatewaySpecAddress{{Type: ip, Value: "198.18.100.9"}}, requested: []string{"198.18.100.9"}},
		{name: "one without type", addrs: []gwv1.GatewaySpecAddress{{Value: "198.18.100.9"}}, requested: []string{"198.18.100.9"}},
		{name: "empty value", addrs: []gwv1.GatewaySpecAddress{{Type: ip}}},
		{name: "two", addrs: []gwv1.GatewaySpecAddress{{Value: "198.18.100.9"}, {Value: "198.18.100.10"}}, requested: []string{"198.18.100.9", "198.18.100.10"}},
		{name: "hostname", addrs: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType), Value: "lb.example.com"}}, unsupported: true, requested: []string{"lb.example.com"}},
		{name: "not an IP", addrs: []gwv1.GatewaySpecAddress{{Value: "lb.example.com"}}, unsupported: true, requested: []string{"lb.example.com"}},
		{name: "another type beside an IP", addrs: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.AddressType("test/fake")), Value: "x"}, {Value: "198.18.100.9"}}, unsupported: true, requested: []string{"x", "198.18.100.9"}},
	} {
		gw := &gwv1.Gateway{Spec: gwv1.GatewaySpec{Addresses: tc.addrs}}
		if got := addressUnsupported(gw) != ""; got != tc.unsupported {
			t.Errorf("%s: unsupported %v (%q), want %v", tc.name, got, addressUnsupported(gw), tc.unsupported)
		}
		if got := requestedAddresses(gw); !slices.Equal(got, tc.requested) {
			t.Errorf("%s: requested %v, want %v", tc.name, got, tc.requested)
		}
	}
}
