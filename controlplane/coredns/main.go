// Command coredns is the real cluster's DNS (cluster/): CoreDNS, the DNS
// server of kubeadm and most distributions, built from its Go module with
// only the plugins a cluster DNS without upstream resolvers needs, as
// CoreDNS's own plugin.cfg builds do, and the two the Gateway API
// conformance suite's UDP backend configures (forward, whoami; it queries
// only whoami's zone). Its own module, so CoreDNS's dependencies stay out
// of the control plane's.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func init() {
	// The order plugins run in: CoreDNS's plugin.cfg order, for the
	// plugins linked above.
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes", "forward", "whoami"}
}

func main() { coremain.Run() }
