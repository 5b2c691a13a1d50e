package apilimits

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// dnsName returns a valid DNS-1123 subdomain of exactly n characters.
func dnsName(n int) string {
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		label := min(63, n-b.Len())
		if label <= 0 {
			break
		}
		b.WriteString(strings.Repeat("a", label))
	}
	s := b.String()
	// A name ending in '.' is not one: move the dot in.
	if strings.HasSuffix(s, ".") {
		s = s[:len(s)-2] + "ab"
	}
	return s
}

func TestDNSNameHelperLengths(t *testing.T) {
	for _, n := range []int{1, 63, 64, 253, 254} {
		if got := len(dnsName(n)); got != n {
			t.Errorf("dnsName(%d) has %d characters", n, got)
		}
	}
}

// Service ingress: each entry the API refuses is left out with the limit
// named; one at each limit is kept, one past it refused.
func TestLoadBalancerIngressOnePastEachLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    corev1.LoadBalancerIngress
		limit string // "" : kept
	}{
		{"ip", corev1.LoadBalancerIngress{IP: "198.18.0.1"}, ""},
		{"ipv6", corev1.LoadBalancerIngress{IP: "2001:db8::1"}, ""},
		{"not an ip", corev1.LoadBalancerIngress{IP: "198.18.0.256"}, "an IP address"},
		{"ipv4 with leading zeros", corev1.LoadBalancerIngress{IP: "198.018.0.1"}, "an IP address"},
		{"hostname of 253", corev1.LoadBalancerIngress{Hostname: dnsName(253)}, ""},
		{"hostname of 254", corev1.LoadBalancerIngress{Hostname: dnsName(254)}, "at most 253 characters"},
		{"hostname with a trailing dot", corev1.LoadBalancerIngress{Hostname: "lb.example."}, "DNS-1123"},
		{"uppercase hostname", corev1.LoadBalancerIngress{Hostname: "LB.example"}, "DNS-1123"},
		{"hostname that is an ip", corev1.LoadBalancerIngress{Hostname: "198.18.0.1"}, "not an IP address"},
		{"ipMode VIP", corev1.LoadBalancerIngress{IP: "198.18.0.1", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}, ""},
		{"ipMode Proxy", corev1.LoadBalancerIngress{IP: "198.18.0.1", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}, ""},
		{"ipMode other", corev1.LoadBalancerIngress{IP: "198.18.0.1", IPMode: ptr.To(corev1.LoadBalancerIPMode("Direct"))}, "VIP or Proxy"},
		{"ipMode without ip", corev1.LoadBalancerIngress{Hostname: "lb.example", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}, "only with an ip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := corev1.LoadBalancerIngress{IP: "198.18.0.9"}
			kept, refused := LoadBalancerIngress([]corev1.LoadBalancerIngress{ok, tc.in})
			if tc.limit == "" {
				if len(kept) != 2 || len(refused) != 0 {
					t.Errorf("kept %v, refused %v; want both kept", kept, refused)
				}
				return
			}
			if len(kept) != 1 || kept[0].IP != ok.IP || len(refused) != 1 || !strings.Contains(refused[0].Limit, tc.limit) || !strings.HasPrefix(refused[0].Field, "status.loadBalancer.ingress[1].") {
				t.Errorf("kept %v, refused %v; want the first kept and ingress[1] refused for %q", kept, refused, tc.limit)
			}
		})
	}
}

// Node addresses: types the API defines, IPs where an IP is meant, DNS
// names up to 253 characters, each address once.
func TestNodeAddressesOnePastEachLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    corev1.NodeAddress
		limit string
	}{
		{"internal ip", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.18.0.2"}, ""},
		{"external ipv6", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::2"}, ""},
		{"internal ip that is not one", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "ip-198-18-0-2"}, "an IP address"},
		{"unknown type", corev1.NodeAddress{Type: "PublicIP", Address: "198.18.0.2"}, "one of Hostname"},
		{"hostname of 253", corev1.NodeAddress{Type: corev1.NodeHostName, Address: dnsName(253)}, ""},
		{"hostname of 254", corev1.NodeAddress{Type: corev1.NodeHostName, Address: dnsName(254)}, "1 to 253 characters"},
		{"internal dns of 254", corev1.NodeAddress{Type: corev1.NodeInternalDNS, Address: dnsName(254)}, "1 to 253 characters"},
		{"empty external dns", corev1.NodeAddress{Type: corev1.NodeExternalDNS}, "1 to 253 characters"},
		{"repeat", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}, "each address once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}
			kept, refused := NodeAddresses([]corev1.NodeAddress{first, tc.in})
			if tc.limit == "" {
				if len(kept) != 2 || len(refused) != 0 {
					t.Errorf("kept %v, refused %v; want both kept", kept, refused)
				}
				return
			}
			if len(kept) != 1 || kept[0] != first || len(refused) != 1 || !strings.Contains(refused[0].Limit, tc.limit) || !strings.HasPrefix(refused[0].Field, "status.addresses[1]") {
				t.Errorf("kept %v, refused %v; want the first kept and addresses[1] refused for %q", kept, refused, tc.limit)
			}
		})
	}
}

// Labels: a value of 63 characters fits, one of 64 does not; keys are
// qualified names.
func TestLabelOnePastEachLimit(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		limit      string
	}{
		{"topology.kubernetes.io/zone", strings.Repeat("z", 63), ""},
		{"topology.kubernetes.io/zone", strings.Repeat("z", 64), "at most 63 characters"},
		{"node.kubernetes.io/instance-type", "m5.large", ""},
		{"node.kubernetes.io/instance-type", "m5 large", "at most 63 characters"},
		{"node.kubernetes.io/instance-type", "-m5", "at most 63 characters"},
		{"example.com/" + strings.Repeat("k", 63), "v", ""},
		{"example.com/" + strings.Repeat("k", 64), "v", "qualified name"},
		{dnsName(253) + "/k", "v", ""},
		{dnsName(254) + "/k", "v", "qualified name"},
		{"", "", "qualified name"},
		{"example.com/empty-value", "", ""},
	} {
		t.Run(fmt.Sprintf("%.40s=%.20s", tc.key, tc.value), func(t *testing.T) {
			v := Label(tc.key, tc.value)
			switch {
			case tc.limit == "" && v != nil:
				t.Errorf("refused: %v", v)
			case tc.limit != "" && (v == nil || !strings.Contains(v.Limit, tc.limit)):
				t.Errorf("got %v, want refused for %q", v, tc.limit)
			}
		})
	}
}

func gwAddr(typ gwv1.AddressType, value string) gwv1.GatewayStatusAddress {
	return gwv1.GatewayStatusAddress{Type: ptr.To(typ), Value: value}
}

// Gateway addresses: 16 fit, a 17th is cut; values up to 253 characters;
// IPAddress values are IPs, Hostname values the CRD's pattern; no repeats.
func TestGatewayAddressesOnePastEachLimit(t *testing.T) {
	many := func(n int) []gwv1.GatewayStatusAddress {
		out := make([]gwv1.GatewayStatusAddress, n)
		for i := range out {
			out[i] = gwAddr(gwv1.IPAddressType, fmt.Sprintf("198.18.1.%d", i+1))
		}
		return out
	}
	kept, refused := GatewayAddresses(many(16))
	if len(kept) != 16 || len(refused) != 0 {
		t.Errorf("16 addresses: kept %d, refused %v", len(kept), refused)
	}
	kept, refused = GatewayAddresses(many(17))
	if len(kept) != 16 || kept[15].Value != "198.18.1.16" || len(refused) != 1 || !strings.Contains(refused[0].Limit, "at most 16 items") {
		t.Errorf("17 addresses: kept %d (last %v), refused %v; want the first 16 and the cut named", len(kept), kept[len(kept)-1], refused)
	}
	for _, tc := range []struct {
		name  string
		in    gwv1.GatewayStatusAddress
		limit string
	}{
		{"hostname of 253", gwAddr(gwv1.HostnameAddressType, dnsName(253)), ""},
		{"hostname of 254", gwAddr(gwv1.HostnameAddressType, dnsName(254)), "1 to 253 characters"},
		{"wildcard hostname", gwAddr(gwv1.HostnameAddressType, "*.gw.example"), ""},
		{"uppercase hostname", gwAddr(gwv1.HostnameAddressType, "GW.example"), "lowercase DNS name"},
		{"ip", gwAddr(gwv1.IPAddressType, "2001:db8::3"), ""},
		{"no type is IPAddress", gwv1.GatewayStatusAddress{Value: "gw.example"}, "an IP address"},
		{"ip that is not one", gwAddr(gwv1.IPAddressType, "198.18.0.300"), "an IP address"},
		{"ip with a zone", gwAddr(gwv1.IPAddressType, "fe80::1%eth0"), "an IP address"},
		{"named address", gwAddr(gwv1.NamedAddressType, "my-address"), ""},
		{"domain-prefixed type", gwAddr("example.com/pool", "blue"), ""},
		{"unknown bare type", gwAddr("Pool", "blue"), "domain-prefixed path"},
		{"empty value", gwAddr(gwv1.NamedAddressType, ""), "1 to 253 characters"},
		{"repeated ip", gwAddr(gwv1.IPAddressType, "198.18.0.1"), "each IPAddress value once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := gwAddr(gwv1.IPAddressType, "198.18.0.1")
			kept, refused := GatewayAddresses([]gwv1.GatewayStatusAddress{first, tc.in})
			if tc.limit == "" {
				if len(kept) != 2 || len(refused) != 0 {
					t.Errorf("kept %v, refused %v; want both kept", kept, refused)
				}
				return
			}
			if len(kept) != 1 || len(refused) != 1 || !strings.Contains(refused[0].Limit, tc.limit) || !strings.HasPrefix(refused[0].Field, "status.addresses[1]") {
				t.Errorf("kept %v, refused %v; want addresses[1] refused for %q", kept, refused, tc.limit)
			}
		})
	}
}

func TestSummaryCutsLongValues(t *testing.T) {
	_, refused := LoadBalancerIngress([]corev1.LoadBalancerIngress{{Hostname: dnsName(254)}})
	s := Summary(refused)
	if !strings.Contains(s, "status.loadBalancer.ingress[0].hostname") || len(s) > 300 {
		t.Errorf("summary %q", s)
	}
}
