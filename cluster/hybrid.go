package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// A hybrid cluster (Options.Hybrid) has nodes of two platforms: the local
// cloud's machines (odd-numbered nodes, providerID local://<name>) and the
// sim cloud's instances (even-numbered, sim://<instance ID>). The harness
// serves the sim cloud in the harness namespace, and one Outrigger runs the
// local and sim providers side by side (--cloud-providers-file). Each
// kubelet starts with its node's providerID (--provider-id), so Outrigger
// hands each node to its provider at once instead of waiting
// --provider-id-wait and asking every provider by name.

// The platforms of a cluster's nodes: the providerID schemes.
const (
	PlatformLocal = "local"
	PlatformSim   = "sim"
)

// SimCloudPort is the sim cloud's API port on BridgeIP (hybrid).
const SimCloudPort = 9401

// SimLoadBalancerClass is the spec.loadBalancerClass of the Services the
// sim provider serves in a hybrid cluster; the local provider serves the
// Services without a class.
const SimLoadBalancerClass = "example.com/sim"

// SimCloudConfig is the sim provider's cloud-config in a hybrid cluster.
var SimCloudConfig = fmt.Sprintf("endpoint: http://%s:%d\n", BridgeIP, SimCloudPort)

// ProvidersFile is Outrigger's --cloud-providers-file in a hybrid cluster;
// the cloud-configs it names are in the same Secret, mounted in dir.
func ProvidersFile(dir string) string {
	return fmt.Sprintf(`apiVersion: outrigger.dev/v1alpha1
kind: CloudProviders
providers:
- name: local
  cloudConfig: %s
  platforms: [local]
- name: sim
  cloudConfig: %s
  platforms: [sim]
  loadBalancerClass: %s
`, path.Join(dir, "local.yaml"), path.Join(dir, "sim.yaml"), SimLoadBalancerClass)
}

// Platform is the platform of the named node: PlatformLocal, or in a
// hybrid cluster PlatformSim for even-numbered nodes.
func (c *Cluster) Platform(name string) string {
	for _, n := range c.nodes {
		if n.Name == name {
			return n.Platform
		}
	}
	return ""
}

// ProviderID is the providerID the named node's machine has: local://<name>,
// or sim://<ID of its current sim instance>.
func (c *Cluster) ProviderID(name string) string {
	switch c.Platform(name) {
	case PlatformLocal:
		return PlatformLocal + "://" + name
	case PlatformSim:
		c.mu.Lock()
		defer c.mu.Unlock()
		if id := c.simIDs[name]; id != "" {
			return PlatformSim + "://" + id
		}
	}
	return ""
}

// SimCloudURL is the sim cloud's API, reached from the harness namespace
// and the nodes; "" unless hybrid.
func (c *Cluster) SimCloudURL() string {
	if c.sim == nil {
		return ""
	}
	return fmt.Sprintf("http://%s:%d", BridgeIP, SimCloudPort)
}

// SimLoadBalancers are the sim cloud's load balancers (VIP, listeners,
// backends), as Outrigger's sim provider made them; nil unless hybrid.
func (c *Cluster) SimLoadBalancers() []simcloud.LoadBalancer {
	if c.sim == nil {
		return nil
	}
	return c.sim.LoadBalancers()
}

// vipPools are the VIP ranges the harness routes: the local provider's, and
// in a hybrid cluster the sim cloud's.
func (c *Cluster) vipPools() []string {
	if c.opts.Hybrid {
		return []string{VIPPool, SimVIPPool}
	}
	return []string{VIPPool}
}

// startSimCloud serves the sim cloud's API in the harness namespace, with
// VIPs from SimVIPPool; StartInstance creates the sim nodes' instances.
func (c *Cluster) startSimCloud(context.Context) error {
	sim := simcloud.New("")
	if err := sim.SetVIPPool(netip.MustParsePrefix(SimVIPPool)); err != nil {
		return err
	}
	ln, err := listenInNetns("/var/run/netns/"+harnessNS, "tcp", net.JoinHostPort(BridgeIP, fmt.Sprint(SimCloudPort)))
	if err != nil {
		return fmt.Errorf("sim cloud: %w", err)
	}
	c.fwd = append(c.fwd, ln)
	go func() {
		_ = (&http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	}()
	c.sim = sim
	c.simIDs = map[string]string{}
	return nil
}

// runSimInstance makes the node's sim instance run: a stopped one is
// started; a missing or terminated one is created (a new ID) with the
// node's real addresses, which Outrigger then keeps on the Node.
func (c *Cluster) runSimInstance(n node) error {
	c.mu.Lock()
	id := c.simIDs[n.Name]
	c.mu.Unlock()
	if in, ok := c.sim.Get(id); ok && id != "" && in.State != simcloud.StateTerminated {
		_, err := c.sim.SetState(id, simcloud.StateRunning)
		return err
	}
	in, err := c.sim.Create(simcloud.CreateRequest{Name: n.Name, Addresses: []simcloud.Address{
		{Type: "InternalIP", Address: n.IP},
		{Type: "Hostname", Address: n.Name},
	}})
	if err != nil {
		return fmt.Errorf("creating %s's sim instance: %w", n.Name, err)
	}
	c.mu.Lock()
	c.simIDs[n.Name] = in.ID
	c.mu.Unlock()
	return nil
}

// setSimState moves the node's sim instance to state (stopped, terminated).
func (c *Cluster) setSimState(name, state string) error {
	c.mu.Lock()
	id := c.simIDs[name]
	c.mu.Unlock()
	if id == "" {
		return fmt.Errorf("%s has no sim instance", name)
	}
	_, err := c.sim.SetState(id, state)
	return err
}

func (c *Cluster) node(name string) (node, bool) {
	i := slices.IndexFunc(c.nodes, func(n node) bool { return n.Name == name })
	if i < 0 {
		return node{}, false
	}
	return c.nodes[i], true
}

// outriggerArgs rewrites the Deployment's provider flags: the local
// provider alone, or in a hybrid cluster both through the providers file,
// which the cloud-config Secret mounted at dir holds.
func (c *Cluster) outriggerArgs(args []string, dir string) []string {
	var out []string
	for _, a := range args {
		switch {
		case a == "--cloud-provider=YOUR-PROVIDER" && c.opts.Hybrid:
			out = append(out, "--cloud-providers-file="+path.Join(dir, "providers.yaml"), "--v=2")
		case a == "--cloud-provider=YOUR-PROVIDER":
			out = append(out, "--cloud-provider=local", "--v=2")
		case strings.HasPrefix(a, "--cloud-config=") && c.opts.Hybrid:
			// Each provider's is named in the providers file.
		default:
			out = append(out, a)
		}
	}
	return out
}

// cloudConfigData is the cloud-config Secret's data: the local provider's
// cloud-config, or in a hybrid cluster the providers file and both
// cloud-configs, for the Secret mounted at dir.
func (c *Cluster) cloudConfigData(dir string) map[string]string {
	if !c.opts.Hybrid {
		return map[string]string{"cloud.yaml": CloudConfig}
	}
	return map[string]string{"providers.yaml": ProvidersFile(dir), "local.yaml": CloudConfig, "sim.yaml": SimCloudConfig}
}
