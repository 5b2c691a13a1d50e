package cluster

import (
	"fmt"
	"net/netip"
)

// The cluster's addresses, all from 198.18.0.0/15 (the benchmarking range),
// as every address the project uses.
const (
	// BridgeCIDR is the node network: the bridge in the harness namespace
	// holds .1, the router namespace .2 (routerIP) and node i .10+i.
	BridgeCIDR = "198.18.0.0/24"
	// BridgeIP is the harness end of the node network, where the API
	// server forwarder listens (on the API server's own port), and the
	// address the API server advertises as the kubernetes Service's
	// endpoint.
	BridgeIP = "198.18.0.1"
	// ClusterCIDR is kube-controller-manager's --cluster-cidr: each node
	// gets a /24 of it as spec.podCIDR.
	ClusterCIDR = "198.18.64.0/18"
	// NodeCIDRMaskSize is the size of each node's pod range.
	NodeCIDRMaskSize = 24
	// VIPPool is the local provider's load balancer VIP pool; the harness
	// namespace answers on all of it (a local route), so Outrigger can bind
	// any VIP there.
	VIPPool = "198.18.100.0/24"
	// SimVIPPool is the sim cloud's load balancer VIP pool in a hybrid
	// cluster (Options.Hybrid), apart from every other range here (past
	// ClusterCIDR's end).
	SimVIPPool = "198.18.128.0/24"
	// ServiceCIDR is the Services' range (--service-cluster-ip-range). It
	// is half of the dev control plane's (internal/dev/apiserver.ServiceCIDR)
	// so that ExternalClientIP can be outside it.
	ServiceCIDR = "198.19.0.0/17"
	// ClusterDNSIP is the kube-dns Service's address (the tenth of
	// ServiceCIDR, as kubeadm's), every pod's nameserver.
	ClusterDNSIP = "198.19.0.10"
	// ExternalClientIP stands for a client on the internet: the harness
	// namespace sends what it sends to a VIP from this address (the VIP
	// pool's route names it as source). It is outside the nodes' /16 and
	// outside ServiceCIDR, as upstream's e2e test of source IP preservation
	// requires of its client (it takes any address in the /16 around a
	// node's InternalIP as a node's), and a node routes it back through
	// the harness, as the internet through a cloud's gateway.
	ExternalClientIP = "198.19.255.1"
)

// KubernetesServiceNames are the names pods reach the API server by: the
// kubernetes Service's ClusterIP (the first address of
// internal/dev/apiserver.ServiceCIDR) and DNS names; the API server's
// serving certificate holds them.
var KubernetesServiceNames = []string{"198.19.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// Names of what the harness creates; one prefix so leftovers are easy to
// recognize.
const (
	prefix    = "orc-"
	harnessNS = prefix + "harness"
	// routerNS forwards each VIP to its healthy nodes (router.go), on
	// the bridge by routerVeth at routerIP.
	routerNS   = prefix + "router"
	routerVeth = "orcrt"
	routerIP   = "198.18.0.2"
	bridgeName = "orcbr0"
	sinkName   = "orcsink"
	// sinkGateway is the sink's made-up next hop (no interface holds it).
	sinkGateway = "198.18.255.254"
	cgroupLeaf  = "outrigger-cluster"
	defaultWork = "/var/tmp/outrigger-cluster"
)

// node is one node's names and addresses.
type node struct {
	Index int
	Name  string // Node name and network namespace name
	IP    string
	Veth  string // the harness end of its veth pair
	Dir   string // its files: containerd, kubelet, CNI config
	// Platform is whose machine it is: PlatformLocal, or PlatformSim
	// (hybrid.go).
	Platform string
}

func newNode(work string, i int, platform string) node {
	name := fmt.Sprintf("%snode%d", prefix, i)
	return node{
		Index:    i,
		Name:     name,
		IP:       netip.MustParseAddr(fmt.Sprintf("198.18.0.%d", 10+i)).String(),
		Veth:     fmt.Sprintf("orcv%d", i),
		Dir:      fmt.Sprintf("%s/%s", work, name),
		Platform: platform,
	}
}

func (n node) netnsPath() string { return "/var/run/netns/" + n.Name }
func (n node) mountNSPath(work string) string {
	return work + "/ns/" + n.Name
}
func (n node) socket() string { return n.Dir + "/containerd.sock" }
