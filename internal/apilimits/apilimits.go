// Package apilimits checks a provider's answers against what the
// Kubernetes API accepts before a controller writes them. A provider's
// answer is input from outside the cluster: one that does not fit (a
// hostname of 254 characters, a 17th Gateway address, a zone name of 64
// characters) makes the API server refuse the whole write, so that a
// Service, a node or a Gateway never gets any of the answer, retried for
// ever. Each check keeps what fits and returns, for what it left out, a
// Violation naming the field and the limit, for an Event naming the
// provider.
//
// The functions are pure: they take the answer and return what to write,
// mutating nothing. Where the API validates an entry, an entry that fails
// is left out (refused); where it bounds a list, the list is cut at the
// bound (truncated), keeping the provider's order (the first address is
// the one clients use).
package apilimits

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Limits, as the API defines them.
const (
	// MaxLabelValueLength is the longest label value (metadata.labels).
	MaxLabelValueLength = validation.LabelValueMaxLength
	// MaxDNSNameLength is the longest DNS-1123 subdomain: a Service
	// ingress hostname, a DNS node address.
	MaxDNSNameLength = validation.DNS1123SubdomainMaxLength
	// MaxGatewayAddresses is the most addresses a Gateway's status holds
	// (the Gateway CRD's maxItems).
	MaxGatewayAddresses = 16
	// MaxGatewayAddressLength is the longest value of a Gateway status
	// address (the CRD's maxLength).
	MaxGatewayAddressLength = 253
)

// Violation is one part of an answer left out, and why.
type Violation struct {
	// Field is where it would have been written, as the API names it:
	// status.loadBalancer.ingress[2].hostname.
	Field string
	// Value is what the provider answered (cut to 80 characters).
	Value string
	// Limit is the limit it breaks, worded for an operator.
	Limit string
}

func (v Violation) String() string { return fmt.Sprintf("%s %q: %s", v.Field, v.Value, v.Limit) }

// Summary is violations in one line, for an Event or a log.
func Summary(violations []Violation) string {
	parts := make([]string, len(violations))
	for i, v := range violations {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

func violation(fld *field.Path, value, limit string) Violation {
	if len(value) > 80 {
		value = value[:77] + "..."
	}
	return Violation{Field: fld.String(), Value: value, Limit: limit}
}

// LoadBalancerIngress returns the ingress points of a Service's
// status.loadBalancer the API server accepts, and a Violation for each it
// would refuse (ValidateLoadBalancerStatus): an ip that is not an IP
// address, an ipMode without an ip or other than VIP or Proxy, a hostname
// that is not a DNS-1123 subdomain of at most 253 characters or is an IP
// address.
func LoadBalancerIngress(in []corev1.LoadBalancerIngress) (kept []corev1.LoadBalancerIngress, refused []Violation) {
	path := field.NewPath("status", "loadBalancer", "ingress")
	for i, ing := range in {
		p := path.Index(i)
		var v []Violation
		if ing.IP != "" {
			if errs := validation.IsValidIPForLegacyField(p.Child("ip"), ing.IP, true, nil); len(errs) > 0 {
				v = append(v, violation(p.Child("ip"), ing.IP, "an IP address"))
			}
		}
		if ing.IPMode != nil {
			switch {
			case ing.IP == "":
				v = append(v, violation(p.Child("ipMode"), string(*ing.IPMode), "only with an ip"))
			case *ing.IPMode != corev1.LoadBalancerIPModeVIP && *ing.IPMode != corev1.LoadBalancerIPModeProxy:
				v = append(v, violation(p.Child("ipMode"), string(*ing.IPMode), "VIP or Proxy"))
			}
		}
		if ing.Hostname != "" {
			if _, err := netip.ParseAddr(ing.Hostname); err == nil {
				v = append(v, violation(p.Child("hostname"), ing.Hostname, "a DNS name, not an IP address"))
			} else if msgs := validation.IsDNS1123Subdomain(ing.Hostname); len(msgs) > 0 {
				v = append(v, violation(p.Child("hostname"), ing.Hostname,
					fmt.Sprintf("a lowercase DNS-1123 subdomain of at most %d characters", MaxDNSNameLength)))
			}
		}
		if len(v) > 0 {
			refused = append(refused, v...)
			continue
		}
		kept = append(kept, ing)
	}
	return kept, refused
}

// nodeAddressTypes are the address types the API defines; readers (the
// API server choosing how to reach a kubelet, kube-proxy, the node
// address helpers) know no others.
var nodeAddressTypes = []corev1.NodeAddressType{corev1.NodeHostName, corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeInternalDNS, corev1.NodeExternalDNS}

// NodeAddresses returns the node addresses that fit what the API and its
// readers take, and a Violation for each left out: a type the API does
// not define, an InternalIP or ExternalIP that is not an IP address, a
// Hostname, InternalDNS or ExternalDNS longer than a DNS name (253
// characters) or empty, and a repeat of an earlier address (the same type
// and value: the list is patched whole, and a repeat is an answer's error).
func NodeAddresses(in []corev1.NodeAddress) (kept []corev1.NodeAddress, refused []Violation) {
	path := field.NewPath("status", "addresses")
	for i, a := range in {
		p := path.Index(i)
		switch {
		case !slices.Contains(nodeAddressTypes, a.Type):
			refused = append(refused, violation(p.Child("type"), string(a.Type), "one of Hostname, InternalIP, ExternalIP, InternalDNS, ExternalDNS"))
		case a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP:
			if _, err := netip.ParseAddr(a.Address); err != nil {
				refused = append(refused, violation(p.Child("address"), a.Address, "an IP address, for type "+string(a.Type)))
				continue
			}
			fallthrough
		default:
			switch {
			case a.Address == "" || len(a.Address) > MaxDNSNameLength:
				refused = append(refused, violation(p.Child("address"), a.Address, fmt.Sprintf("1 to %d characters", MaxDNSNameLength)))
			case slices.Contains(kept, a):
				refused = append(refused, violation(p, string(a.Type)+" "+a.Address, "each address once"))
			default:
				kept = append(kept, a)
			}
		}
	}
	return kept, refused
}

// Label returns a Violation when the label key=value does not fit
// metadata.labels (a qualified name as key; a value of at most 63
// characters, alphanumerics, '-', '_' and '.', starting and ending with an
// alphanumeric), nil when it does. A label that does not fit is left off,
// never cut: a zone name cut short names another zone, or none.
func Label(key, value string) *Violation {
	p := field.NewPath("metadata", "labels").Key(key)
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		v := violation(p, key, "a qualified name as key (an optional DNS prefix and '/', then at most 63 characters)")
		return &v
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		v := violation(p, value, fmt.Sprintf("a label value of at most %d characters: alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric", MaxLabelValueLength))
		return &v
	}
	return nil
}

var (
	// gatewayHostname is the Gateway CRD's pattern for a Hostname address.
	gatewayHostname = regexp.MustCompile(`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// gatewayAddressType is the CRD's pattern for an address type.
	gatewayAddressType = regexp.MustCompile(`^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`)
)

// GatewayAddresses returns the addresses a Gateway's status.addresses
// takes (the Gateway CRD's validation), and a Violation for each left
// out: a value empty or longer than 253 characters, a type the CRD's
// pattern refuses, an IPAddress that is not an IP address, a Hostname that
// does not match the CRD's pattern, a repeated IPAddress or Hostname value;
// then the list is cut at 16, the CRD's maxItems, keeping the provider's
// first (one Violation says how many were cut). A Gateway whose status
// would break any of these has every status write refused, its
// conditions' too.
func GatewayAddresses(in []gwv1.GatewayStatusAddress) (kept []gwv1.GatewayStatusAddress, refused []Violation) {
	path := field.NewPath("status", "addresses")
	seen := map[string]bool{}
	for i, a := range in {
		p := path.Index(i)
		typ := gwv1.IPAddressType // the CRD's default
		if a.Type != nil {
			typ = *a.Type
		}
		switch {
		case a.Value == "" || len(a.Value) > MaxGatewayAddressLength:
			refused = append(refused, violation(p.Child("value"), a.Value, fmt.Sprintf("1 to %d characters", MaxGatewayAddressLength)))
		case !gatewayAddressType.MatchString(string(typ)):
			refused = append(refused, violation(p.Child("type"), string(typ), "Hostname, IPAddress, NamedAddress or a domain-prefixed path"))
		case typ == gwv1.IPAddressType && !isIP(a.Value):
			refused = append(refused, violation(p.Child("value"), a.Value, "an IP address, for type IPAddress"))
		case typ == gwv1.HostnameAddressType && !gatewayHostname.MatchString(a.Value):
			refused = append(refused, violation(p.Child("value"), a.Value, "a lowercase DNS name (an optional leading '*.'), for type Hostname"))
		case (typ == gwv1.IPAddressType || typ == gwv1.HostnameAddressType) && seen[string(typ)+"/"+a.Value]:
			refused = append(refused, violation(p.Child("value"), a.Value, "each "+string(typ)+" value once"))
		default:
			seen[string(typ)+"/"+a.Value] = true
			kept = append(kept, a)
		}
	}
	if len(kept) > MaxGatewayAddresses {
		refused = append(refused, violation(path, fmt.Sprintf("%d valid addresses", len(kept)),
			fmt.Sprintf("at most %d items: the first %d kept", MaxGatewayAddresses, MaxGatewayAddresses)))
		kept = kept[:MaxGatewayAddresses]
	}
	return kept, refused
}

// isIP is the CRD's isIP(): an IPv4 or IPv6 address, without a zone.
func isIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}
