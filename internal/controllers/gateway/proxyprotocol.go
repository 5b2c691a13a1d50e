package gateway

import (
	"maps"
	"slices"
)

// A Gateway's proxyProtocol setting has its data plane expect a PROXY
// protocol header on every TCP connection; the cloud's load balancer in
// front must then send one, and a provider is asked to by an annotation
// of the load balancer's Service, each provider its own. Outrigger sets
// it for the providers below, whose annotation was checked against their
// documentation or source; for any other the Gateway's owner gives it in
// spec.infrastructure.annotations (docs/gateway.md, "What a backend
// learns of the client").

// proxyProtocolAsk is how one provider's load balancer is asked to send
// PROXY protocol headers.
type proxyProtocolAsk struct {
	// provider is the --cloud-provider name.
	provider   string
	key, value string
}

// proxyProtocolAsks are the providers whose annotation Outrigger sets.
var proxyProtocolAsks = []proxyProtocolAsk{
	// The local provider's proxies (internal/providers/local,
	// AnnotationProxyProtocol), and outrigger dev's, which are they.
	{provider: "local", key: "local.outrigger.dev/proxy-protocol", value: "v2"},
	{provider: "dev", key: "local.outrigger.dev/proxy-protocol", value: "v2"},
	// cloud-provider-aws: "*" enables it on every listener of a classic
	// ELB (version 1).
	{provider: "aws", key: "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol", value: "*"},
	// digitalocean-cloud-controller-manager, docs/controllers/services/annotations.md.
	{provider: "digitalocean", key: "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol", value: "true"},
	// hcloud-cloud-controller-manager, internal/annotation (LBSvcProxyProtocol).
	{provider: "hcloud", key: "load-balancer.hetzner.cloud/uses-proxyprotocol", value: "true"},
	// linode-cloud-controller-manager: v1, v2 or none; the older
	// linode-loadbalancer-proxy-protocol is deprecated for this one.
	{provider: "linode", key: "service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol", value: "v2"},
	// cloud-provider-openstack (Octavia): the pool's protocol PROXY.
	{provider: "openstack", key: "loadbalancer.openstack.org/proxy-protocol", value: "true"},
}

// proxyProtocolAskOf is provider's entry, if it has one.
func proxyProtocolAskOf(provider string) (proxyProtocolAsk, bool) {
	i := slices.IndexFunc(proxyProtocolAsks, func(a proxyProtocolAsk) bool { return a.provider == provider })
	if i < 0 {
		return proxyProtocolAsk{}, false
	}
	return proxyProtocolAsks[i], true
}

// serviceAnnotations are the annotations the load balancer's Service is
// given (set) and those it must lose (remove): spec.infrastructure's
// (infra), with the provider's PROXY protocol annotation when the
// setting is on. The owner's own value for that key wins (Linode's "v1",
// say); when the setting is off, the key goes unless the owner gives it,
// so that turning the setting off turns the load balancer's headers off
// too, never leaving a data plane that no longer reads them behind a
// load balancer that still sends them.
func serviceAnnotations(provider string, proxyProtocol bool, infra map[string]string) (set map[string]string, remove []string) {
	set = maps.Clone(infra)
	if set == nil {
		set = map[string]string{}
	}
	ask, ok := proxyProtocolAskOf(provider)
	if !ok {
		return set, nil
	}
	if _, own := infra[ask.key]; own {
		return set, nil
	}
	if proxyProtocol {
		set[ask.key] = ask.value
		return set, nil
	}
	return set, []string{ask.key}
}
