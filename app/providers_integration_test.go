//go:build integration

package app_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// waitInitialized creates a node and waits for the fake cloud's providerID
// on it, failing at once if the command ends.
func waitInitialized(t *testing.T, ended func() (bool, error)) {
	t.Helper()
	node := testenv.Name("provider-node")
	testenv.CreateNode(t, node, nil)
	testenv.Eventually(t, 60*time.Second, "the node initialized", func() (bool, error) {
		if done, err := ended(); done {
			t.Fatalf("the command ended: %v", err)
		}
		return testenv.GetNode(t, node).Spec.ProviderID == "fake://"+node, nil
	})
}

// waitLoadBalancer creates a LoadBalancer Service and waits for the fake
// cloud's address in its status.
func waitLoadBalancer(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("provider-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 60*time.Second, "the Service's load balancer", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ing := s.Status.LoadBalancer.Ingress
		return len(ing) == 1 && ing[0].IP == "198.18.100.1", nil
	})
}

// TestLinodeShapedMain is a main of Linode's shape (its main.go at HEAD,
// read and written anew): flags of its own added to command.Flags() once
// the command is built, two of them named as Outrigger's node IPAM flags;
// --cloud-provider preset through Flags().VisitAll; an initializer that
// reads --allocate-node-cidrs and --cluster-cidr to run its own IPAM.
// Its flags are parsed as its own; like upstream's, --help leaves them out.
func TestLinodeShapedMain(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu           sync.Mutex
		allocate     bool
		clusterCIDR  string
		maskV4       int
		maskV6       int
		lbType       string
		routeEnabled bool
	)
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		mu.Lock()
		defer mu.Unlock()
		allocate = c.ComponentConfig.KubeCloudShared.AllocateNodeCIDRs
		clusterCIDR = c.ComponentConfig.KubeCloudShared.ClusterCIDR
		cloud := fakeCloud()
		cloud.DisableLoadBalancers = false
		return cloud
	}
	// linodeMain builds the command as Linode's main does.
	linodeMain := func(s *options.CloudControllerManagerOptions, stop chan struct{}) *cobra.Command {
		cmd := app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
		cmd.Flags().BoolVar(&routeEnabled, "enable-route-controller", false, "Linode's route controller.")
		cmd.Flags().StringVar(&lbType, "load-balancer-type", "nodebalancer", "Linode's load balancer kind.")
		cmd.Flags().IntVar(&maskV4, "node-cidr-mask-size-ipv4", 0, "Linode's IPv4 pod CIDR size.")
		cmd.Flags().IntVar(&maskV6, "node-cidr-mask-size-ipv6", 0, "Linode's IPv6 pod CIDR size.")
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			var err error
			switch f.Name {
			case "cloud-provider":
				err = f.Value.Set("linode")
			case "authentication-skip-lookup":
				err = f.Value.Set("true")
			}
			if err != nil {
				t.Fatalf("presetting --%s: %v", f.Name, err)
			}
		})
		return cmd
	}
	helpOpts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	// --help lists the command's named flag sets, as upstream's: flags
	// added to command.Flags() afterwards are parsed but not listed, there
	// as here (Linode's included), nor is Outrigger's flag they replaced.
	help := helpOf(t, linodeMain(helpOpts, make(chan struct{})))
	if !strings.Contains(help, "Generic flags:") || !strings.Contains(help, "--cluster-cidr string") {
		t.Errorf("--help lacks upstream's sections:\n%s", help)
	}
	for _, flag := range []string{"--load-balancer-type", "--enable-route-controller", "--node-cidr-mask-size-ipv4"} {
		if strings.Contains(help, flag+" ") {
			t.Errorf("--help lists %s, which upstream's --help leaves out", flag)
		}
	}
	stop := make(chan struct{})
	cmd := linodeMain(s, stop)
	if cmd.Flags().Lookup("kubeconfig") == nil {
		t.Fatal("no --kubeconfig on the command's flags")
	}
	ended := startCommand(t, cmd, stop, "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16",
		"--node-cidr-mask-size-ipv4=24", "--load-balancer-type=cilium-bgp")
	waitInitialized(t, ended)
	waitLoadBalancer(t)
	mu.Lock()
	defer mu.Unlock()
	if !allocate || clusterCIDR != "198.18.0.0/16" || maskV4 != 24 || maskV6 != 0 || lbType != "cilium-bgp" {
		t.Errorf("Linode's main saw allocate=%t cluster-cidr=%q masks=%d/%d load-balancer-type=%q", allocate, clusterCIDR, maskV4, maskV6, lbType)
	}
}

// TestGCPShapedMain is a main of GCP's shape: Int32Var for the node IPAM
// mask sizes in an additional flag set, its own node-ipam-controller
// (alias nodeipam) among the default constructors, controllers of its own
// disabled by default, an initializer that refuses an untagged cloud.
func TestGCPShapedMain(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		ipamRan bool
		maskV4  int32
		maskV6  int32
	)
	fss := cliflag.NamedFlagSets{}
	fs := fss.FlagSet("nodeipam controller")
	fs.Int32Var(&maskV4, "node-cidr-mask-size-ipv4", 24, "GCP's IPv4 pod CIDR size.")
	fs.Int32Var(&maskV6, "node-cidr-mask-size-ipv6", 64, "GCP's IPv6 pod CIDR size.")
	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	constructors["node-ipam-controller"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		ipamRan = true
		return nil, true, nil
	})
	constructors["gkenetworkparamset"] = extra(func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		return nil, false, errors.New("disabled by default: never started (an error here stops the command)")
	})
	app.ControllersDisabledByDefault.Insert("gkenetworkparamset")
	defer app.ControllersDisabledByDefault.Delete("gkenetworkparamset")
	aliases := names.CCMControllerAliases()
	aliases["nodeipam"] = "node-ipam-controller"
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		cloud := fakeCloud()
		if !cloud.HasClusterID() && !c.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
			t.Error("the fake cloud has no cluster ID")
		}
		return cloud
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, constructors, aliases, fss, stop)
	ended := startCommand(t, cmd, stop, "--cloud-provider=gce", "--controllers=*",
		"--node-cidr-mask-size-ipv4=26", "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16")
	waitInitialized(t, ended)
	testenv.Eventually(t, 30*time.Second, "GCP's node IPAM started", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return ipamRan, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if maskV4 != 26 || maskV6 != 64 {
		t.Errorf("GCP's masks %d/%d, want 26/64", maskV4, maskV6)
	}
}

// TestHcloudShapedMain is a main of hcloud's shape: the defaults, an
// initializer that takes a Node lister from the config's SharedInformers
// and --cluster-cidr, and its chart's networking.enabled passing
// --allocate-node-cidrs; the cloud answers from that lister, so a node is
// initialized only once the shared informers run. hcloud has no flags of
// its own (its settings are environment variables) and serves no webhooks:
// --help shows upstream's sections with the flags its initializer reads.
func TestHcloudShapedMain(t *testing.T) {
	helpOpts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	helpCmd := app.NewCloudControllerManagerCommand(helpOpts, func(*config.CompletedConfig) cloudprovider.Interface { return nil },
		app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, make(chan struct{}))
	help := helpOf(t, helpCmd)
	for _, want := range []string{"Generic flags:", "--cluster-cidr string", "--allocate-node-cidrs", "--allow-untagged-cloud", "--webhooks strings"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}

	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		clusterCIDR string
	)
	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		nodes := c.SharedInformers.Core().V1().Nodes().Lister()
		mu.Lock()
		clusterCIDR = c.ComponentConfig.KubeCloudShared.ClusterCIDR
		mu.Unlock()
		cloud := fakeCloud()
		cloud.DisableLoadBalancers = false
		answer := cloud.OverrideInstanceMetadata
		cloud.OverrideInstanceMetadata = func(ctx context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			if _, err := nodes.Get(n.Name); err != nil {
				return nil, fmt.Errorf("hcloud's lister: %w", err)
			}
			return answer(ctx, n)
		}
		return cloud
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	ended := startCommand(t, cmd, stop, "--cloud-provider=hcloud", "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16")
	waitInitialized(t, ended)
	waitLoadBalancer(t)
	mu.Lock()
	defer mu.Unlock()
	if clusterCIDR != "198.18.0.0/16" {
		t.Errorf("hcloud's initializer saw --cluster-cidr %q", clusterCIDR)
	}
}
