//go:build integration

package app_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/fake"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// openstackName is the name the OpenStack-shaped provider registers, as
// OpenStack's package registers "openstack" from its init.
const openstackName = "openstack-shaped"

// openstackCloud is the last cloud the registered factory made.
var openstackCloud atomic.Pointer[openstackShaped]

func init() {
	cloudprovider.RegisterCloudProvider(openstackName, func(config io.Reader) (cloudprovider.Interface, error) {
		// As OpenStack's ReadConfig: a cloud-config is required, its
		// load balancer section may turn load balancers off.
		if config == nil {
			return nil, errors.New("no OpenStack cloud provider config file given")
		}
		b, err := io.ReadAll(config)
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(b, []byte("[Global]")) {
			return nil, errors.New("the cloud-config has no [Global] section")
		}
		inner := fakeCloud()
		inner.DisableLoadBalancers = bytes.Contains(b, []byte("enabled = false"))
		inner.DisableRoutes = false
		inner.RouteMap = map[string]*fake.Route{}
		c := &openstackShaped{slowLB: &slowLB{Cloud: inner, took: 3 * time.Second}}
		openstackCloud.Store(c)
		return c, nil
	})
}

// openstackShaped stands in for OpenStack's provider where Outrigger can
// see it: Initialize takes a client as "cloud-controller-manager";
// SetInformers (cloudprovider.InformerUser) gives it the shared informer
// factory, whose node lister its routes read, refusing until it synced;
// load balancer calls wait on the cloud's provisioning status (Octavia's
// work takes minutes; 3 s here) with the context they are given.
type openstackShaped struct {
	*slowLB
	initialized atomic.Bool

	mu     sync.Mutex
	nodes  corelisters.NodeLister
	synced func() bool
}

func (c *openstackShaped) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	b.ClientOrDie("cloud-controller-manager")
	c.initialized.Store(true)
}

func (c *openstackShaped) SetInformers(f informers.SharedInformerFactory) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = f.Core().V1().Nodes().Lister()
	c.synced = f.Core().V1().Nodes().Informer().HasSynced
}

func (c *openstackShaped) HasClusterID() bool { return true }

func (c *openstackShaped) Routes() (cloudprovider.Routes, bool) { return c, true }

func (c *openstackShaped) CreateRoute(ctx context.Context, cluster, hint string, route *cloudprovider.Route) error {
	c.mu.Lock()
	nodes, synced := c.nodes, c.synced
	c.mu.Unlock()
	if synced == nil || !synced() {
		return errors.New("the node informer has not synced")
	}
	if _, err := nodes.Get(string(route.TargetNode)); err != nil {
		return fmt.Errorf("route's node from the informer: %w", err)
	}
	return c.Cloud.CreateRoute(ctx, cluster, hint, route)
}

// openstackMain is a main of OpenStack's shape (its
// cmd/openstack-cloud-controller-manager at HEAD, read and written anew):
// the provider's one flag, --user-agent (a string array), in a flag set of
// its own named "OpenStack Client"; the default controllers and upstream's
// aliases; an initializer that initializes the cloud by name from the
// cloud-config and refuses one without a cluster ID unless
// --allow-untagged-cloud. userAgent holds the flag's values once parsed.
func openstackMain(t *testing.T, stop chan struct{}) (cmd *cobra.Command, userAgent *[]string) {
	t.Helper()
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	userAgent = new([]string)
	fss := cliflag.NamedFlagSets{}
	fss.FlagSet("OpenStack Client").StringArrayVar(userAgent, "user-agent", nil, "Extra data for the OpenStack client's user agent; repeat for more.")
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		p := c.ComponentConfig.KubeCloudShared.CloudProvider
		cloud, err := cloudprovider.InitCloudProvider(p.Name, p.CloudConfigFile)
		if err != nil || cloud == nil {
			t.Errorf("the cloud could not be initialized: %v", err)
			return nil
		}
		if !cloud.HasClusterID() && !c.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
			t.Error("no ClusterID found")
		}
		return cloud
	}
	return app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), fss, stop), userAgent
}

// TestOpenStackShapedMain runs a main of OpenStack's shape: its flag
// section in --help; with its cloud-config, nodes initialized (the
// provider initialized and given the shared informers), a route per node
// made once the provider's node informer synced, and a LoadBalancer
// provisioned by a call that waits on the cloud with no deadline, as under
// upstream's app (OpenStack's Octavia calls wait minutes); /healthz has a
// check per controller under upstream's names. OpenStack's CCM serves no
// webhooks.
func TestOpenStackShapedMain(t *testing.T) {
	helpCmd, _ := openstackMain(t, make(chan struct{}))
	help := helpOf(t, helpCmd)
	for _, want := range []string{"OpenStack Client flags:", "--user-agent stringArray", "--cloud-config string", "--configure-cloud-routes"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}

	cfg := filepath.Join(t.TempDir(), "cloud.conf")
	if err := os.WriteFile(cfg, []byte("[Global]\nauth-url = http://127.0.0.1:1/identity\n\n[LoadBalancer]\nenabled = true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	podCIDR := map[string]string{}
	var nodes []string
	for i := range 2 {
		n := testenv.Name("openstack-node")
		podCIDR[n] = fmt.Sprintf("198.18.%d.0/24", 10+i)
		nodes = append(nodes, n)
		testenv.CreateNode(t, n, func(node *corev1.Node) {
			// As kube-controller-manager's node IPAM gives it; the
			// app package runs none, as upstream's.
			node.Spec.PodCIDR, node.Spec.PodCIDRs = podCIDR[n], []string{podCIDR[n]}
		})
	}

	stop := make(chan struct{})
	cmd, userAgent := openstackMain(t, stop)
	port := freePort(t)
	ended := startCommand(t, cmd, stop, "--cloud-provider="+openstackName, "--cloud-config="+cfg, "--user-agent=outrigger", "--user-agent=test",
		"--allocate-node-cidrs", "--configure-cloud-routes", "--cluster-cidr=198.18.0.0/16", "--cluster-name=openstack",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authentication-kubeconfig="+testenv.Kubeconfig, "--authorization-kubeconfig="+testenv.Kubeconfig)

	for _, n := range nodes {
		testenv.Eventually(t, 60*time.Second, "node "+n+" initialized", func() (bool, error) {
			if done, err := ended(); done {
				t.Fatalf("the command ended: %v", err)
			}
			return testenv.GetNode(t, n).Spec.ProviderID == "fake://"+n, nil
		})
	}
	cloud := openstackCloud.Load()
	if cloud == nil || !cloud.initialized.Load() {
		t.Fatal("the provider was not initialized")
	}
	testenv.Eventually(t, 60*time.Second, "a route to each node's pod CIDR, made from the provider's informer", func() (bool, error) {
		cloud.Lock.Lock()
		defer cloud.Lock.Unlock()
		for _, n := range nodes {
			found := false
			for _, r := range cloud.RouteMap {
				found = found || (string(r.Route.TargetNode) == n && r.Route.DestinationCIDR == podCIDR[n])
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})

	waitLoadBalancer(t)
	if cloud.hadDeadline.Load() {
		t.Error("a load balancer call had a deadline under OpenStack's main, where upstream sets none")
	}
	if got := strings.Join(*userAgent, ","); got != "outrigger,test" {
		t.Errorf("--user-agent read as %q, want outrigger,test", got)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the port's self-signed certificate
	testenv.Eventually(t, 30*time.Second, "a check per controller on /healthz", func() (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz?verbose", port))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, c := range []string{names.CloudNodeController, names.CloudNodeLifecycleController, names.ServiceLBController, names.NodeRouteController} {
			if !strings.Contains(string(b), "[+]"+c+" ok") {
				return false, fmt.Errorf("no %s in %s", c, b)
			}
		}
		return true, nil
	})
}
