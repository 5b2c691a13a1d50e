// Package gcp_test runs the GCE cloud provider of Kubernetes'
// cloud-provider-gcp, k8s.io/cloud-provider-gcp/providers as published on
// the Go module proxy, on Outrigger's app package: registered by its own
// init, found by name through cloudprovider.InitCloudProvider, reading its
// own cloud-config, and calling a loopback stand-in of the Compute Engine
// API for nodes and load balancers. GCP's main (k8s.io/cloud-provider-gcp's
// cmd/cloud-controller-manager) is not on the proxy: the main here is of its
// shape, written from reading it.
package gcp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"

	// The GCE provider registers itself as "gce" in its init, as in GCP's main.
	"k8s.io/cloud-provider-gcp/providers/gce"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	project = "outrigger-gcp"
	zone    = "us-central1-b"
	region  = "us-central1"
)

// gcpMain builds the command as GCP's main does: its provider flags and
// the node IPAM mask sizes (int32) in flag sets of their own, its own
// node-ipam-controller (alias nodeipam), the node controllers acting as
// node-controller, a controller of its own disabled by default, and an
// initializer that initializes the provider by name from the cloud-config
// and refuses a cloud without a cluster ID unless --allow-untagged-cloud.
// ipamAsked records whether the node IPAM constructor was run and saw
// --allocate-node-cidrs (GCP's own controller is in its main module, not
// on the proxy; this one stands in for it and starts nothing).
func gcpMain(t *testing.T, stop <-chan struct{}, ipamAsked chan<- bool) *commandUnderTest {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	var (
		multiProject bool
		maskV4       int32
		maskV6       int32
	)
	fss := cliflag.NamedFlagSets{}
	gceFS := fss.FlagSet("GCE Cloud Provider")
	gceFS.BoolVar(&multiProject, "enable-multi-project", false, "Take the project of GCE calls from the node's providerID.")
	ipamFS := fss.FlagSet("nodeipam controller")
	ipamFS.Int32Var(&maskV4, "node-cidr-mask-size-ipv4", 24, "Mask size of IPv4 node CIDRs.")
	ipamFS.Int32Var(&maskV6, "node-cidr-mask-size-ipv6", 64, "Mask size of IPv6 node CIDRs.")

	constructors := maps.Clone(app.DefaultInitFuncConstructors)
	constructors["node-ipam-controller"] = app.ControllerInitFuncConstructor{
		Constructor: func(_ app.ControllerInitContext, cfg *config.CompletedConfig, _ cloudprovider.Interface) app.InitFunc {
			return func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				select {
				case ipamAsked <- cfg.ComponentConfig.KubeCloudShared.AllocateNodeCIDRs:
				default:
				}
				return nil, false, nil
			}
		},
	}
	for _, name := range []string{names.CloudNodeController, names.CloudNodeLifecycleController} {
		c := constructors[name]
		c.InitContext.ClientName = "node-controller"
		constructors[name] = c
	}
	constructors["gkenetworkparamset"] = app.ControllerInitFuncConstructor{
		Constructor: func(app.ControllerInitContext, *config.CompletedConfig, cloudprovider.Interface) app.InitFunc {
			return func(context.Context, genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
				return nil, false, errors.New("disabled by default, yet started")
			}
		},
	}
	app.ControllersDisabledByDefault.Insert("gkenetworkparamset")
	t.Cleanup(func() { app.ControllersDisabledByDefault.Delete("gkenetworkparamset") })
	aliases := names.CCMControllerAliases()
	aliases["nodeipam"] = "node-ipam-controller"

	cloudInit := func(c *config.CompletedConfig) cloudprovider.Interface {
		p := c.ComponentConfig.KubeCloudShared.CloudProvider
		cloud, err := cloudprovider.InitCloudProvider(p.Name, p.CloudConfigFile)
		if err != nil || cloud == nil {
			t.Errorf("provider %q with %s: %v", p.Name, p.CloudConfigFile, err)
			return nil
		}
		if !cloud.HasClusterID() && !c.ComponentConfig.KubeCloudShared.AllowUntaggedCloud {
			t.Error("no cluster ID")
		}
		return cloud
	}
	return &commandUnderTest{Command: app.NewCloudControllerManagerCommand(s, cloudInit, constructors, aliases, fss, stop),
		maskV4: &maskV4}
}

// TestGCEProviderOnOutrigger runs the GCE provider's own code under a main
// of GCP's shape against the package's API server and the loopback
// Compute Engine: GCP's flag sections are in --help; nodes registered as
// kubelets register them on GCE are initialized from their instances
// (providerID gce://project/zone/name, machine type, zone, region, internal
// and external addresses); the controllers run under upstream's names with
// a health check each; a LoadBalancer Service gets GCE's external load
// balancer (address, health check, target pool of the nodes' instances,
// firewall, forwarding rule), torn down when the Service goes; a node
// whose VM was deleted is deleted.
func TestGCEProviderOnOutrigger(t *testing.T) {
	if !cloudprovider.IsCloudProvider(gce.ProviderName) {
		t.Fatalf("the GCE provider's init registered no %q", gce.ProviderName)
	}
	cloud := startCompute(t)
	// The metadata server the provider's libraries ask is the stand-in.
	t.Setenv("GCE_METADATA_HOST", strings.TrimPrefix(cloud.url, "http://"))

	var help bytes.Buffer
	helpCmd := gcpMain(t, make(chan struct{}), make(chan bool, 1))
	helpCmd.SetOut(&help)
	helpCmd.SetArgs([]string{"--help"})
	if err := helpCmd.Execute(); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"GCE Cloud Provider flags:", "--enable-multi-project", "Nodeipam controller flags:",
		"--node-cidr-mask-size-ipv4 int32", "--cloud-call-timeout"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}

	nodes := []string{testenv.Name("gce-node"), testenv.Name("gce-node"), testenv.Name("gce-node")}
	for i, n := range nodes {
		cloud.addInstance(project, zone, n, "n2-standard-4", fmt.Sprintf("198.18.0.%d", 10+i), fmt.Sprintf("198.18.100.%d", 10+i))
		testenv.CreateNode(t, n, nil)
	}
	cfg := filepath.Join(t.TempDir(), "gce.conf")
	if err := os.WriteFile(cfg, []byte(`[global]
project-id = `+project+`
local-zone = `+zone+`
network-name = default
node-tags = outrigger-node
token-url = `+cloud.url+`/token
api-endpoint = `+cloud.url+`/compute/v1/
container-api-endpoint = `+cloud.url+`/container/
`), 0o600); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	ipamAsked := make(chan bool, 1)
	cmd := gcpMain(t, stop, ipamAsked)
	port := freeport.Get(t)
	ended := cmd.start(t, stop, "--kubeconfig="+testenv.Kubeconfig, "--leader-elect-resource-name="+testenv.Name("gce"),
		"--cloud-provider=gce", "--cloud-config="+cfg, "--cluster-name=outrigger-gcp", "--node-cidr-mask-size-ipv4=26", "--node-monitor-period=1s",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port),
		"--authentication-kubeconfig="+testenv.Kubeconfig, "--authorization-kubeconfig="+testenv.Kubeconfig)

	for i, n := range nodes {
		testenv.Eventually(t, 90*time.Second, "node "+n+" initialized from its GCE instance", func() (bool, error) {
			if done, err := ended(); done {
				t.Fatalf("the command ended: %v", err)
			}
			node := testenv.GetNode(t, n)
			return node.Spec.ProviderID == "gce://"+project+"/"+zone+"/"+n &&
				node.Labels[corev1.LabelInstanceTypeStable] == "n2-standard-4" &&
				node.Labels[corev1.LabelTopologyZone] == zone && node.Labels[corev1.LabelTopologyRegion] == region &&
				hasAddress(node, corev1.NodeInternalIP, fmt.Sprintf("198.18.0.%d", 10+i)) &&
				hasAddress(node, corev1.NodeExternalIP, fmt.Sprintf("198.18.100.%d", 10+i)) &&
				!hasTaint(node, cloudproviderapi.TaintExternalCloudProvider), nil
		})
	}
	select {
	case allocate := <-ipamAsked:
		if allocate {
			t.Error("GCP's node IPAM saw --allocate-node-cidrs, which was not given")
		}
	case <-time.After(30 * time.Second):
		t.Error("GCP's node-ipam-controller was never constructed")
	}
	if *cmd.maskV4 != 26 {
		t.Errorf("GCP's --node-cidr-mask-size-ipv4 is %d, want 26", *cmd.maskV4)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the port's self-signed certificate
	testenv.Eventually(t, 30*time.Second, "a health check per controller on /healthz", func() (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz?verbose", port))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, c := range []string{names.CloudNodeController, names.CloudNodeLifecycleController, names.ServiceLBController} {
			if !strings.Contains(string(b), "[+]"+c+" ok") {
				return false, fmt.Errorf("%s not in %s", c, b)
			}
		}
		return !strings.Contains(string(b), "gkenetworkparamset"), nil
	})

	serviceGetsExternalLB(t, cloud, nodes)

	// A VM deleted in the cloud: its node, NotReady, is deleted once GCE's
	// code answers that the instance is gone (a 404 from the API).
	gone := nodes[2]
	cloud.removeInstance(project, zone, gone)
	testenv.SetReady(t, gone, false)
	testenv.Eventually(t, 60*time.Second, "node "+gone+" deleted with its VM", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Nodes().Get(context.Background(), gone, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	for _, n := range nodes[:2] {
		if _, err := testenv.Client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{}); err != nil {
			t.Errorf("node %s, whose VM runs: %v", n, err)
		}
	}
}

// serviceGetsExternalLB creates a LoadBalancer Service and follows GCE's
// external load balancer code through the stand-in: the forwarding rule's
// address in the Service's status, the target pool holding every node's
// instance, the firewall and health check; deleting the Service deletes them.
func serviceGetsExternalLB(t *testing.T, cloud *compute, nodes []string) {
	t.Helper()
	ctx := context.Background()
	svc, err := testenv.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("gce-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lbName := cloudprovider.DefaultLoadBalancerName(svc)
	fwdRule := "projects/" + project + "/regions/" + region + "/forwardingRules/" + lbName
	pool := "projects/" + project + "/regions/" + region + "/targetPools/" + lbName
	var ingress string
	testenv.Eventually(t, 90*time.Second, "the Service's GCE load balancer", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ing := s.Status.LoadBalancer.Ingress; len(ing) == 1 {
			ingress = ing[0].IP
			return true, nil
		}
		return false, nil
	})
	rule, ok := cloud.get(fwdRule)
	if !ok || rule["IPAddress"] != ingress || !strings.HasSuffix(fmt.Sprint(rule["target"]), "/targetPools/"+lbName) {
		t.Errorf("forwarding rule %s: %v, Service ingress %s", fwdRule, rule, ingress)
	}
	tp, ok := cloud.get(pool)
	if !ok {
		t.Fatalf("no target pool %s", pool)
	}
	members := fmt.Sprint(tp["instances"])
	for _, n := range nodes {
		if !strings.Contains(members, "/zones/"+zone+"/instances/"+n) {
			t.Errorf("target pool lacks %s: %s", n, members)
		}
	}
	if _, ok := cloud.get("projects/" + project + "/global/firewalls/k8s-fw-" + lbName); !ok {
		t.Errorf("no firewall k8s-fw-%s", lbName)
	}
	if cloud.count("POST httpHealthChecks") == 0 {
		t.Error("no health check was made")
	}

	if err := testenv.Client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "the load balancer deleted with its Service", func() (bool, error) {
		_, ruleLeft := cloud.get(fwdRule)
		_, poolLeft := cloud.get(pool)
		_, err := testenv.Client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		return !ruleLeft && !poolLeft && apierrors.IsNotFound(err), nil
	})
	// Outrigger looks at the Service again once a long call returns: that
	// second EnsureLoadBalancer found the load balancer as made, and made
	// none again.
	if n := cloud.count("POST forwardingRules"); n != 1 {
		t.Errorf("%d forwarding rules inserted, want 1", n)
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

func hasAddress(n *corev1.Node, typ corev1.NodeAddressType, addr string) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == typ && a.Address == addr {
			return true
		}
	}
	return false
}

// commandUnderTest is a provider's command with what its main read from
// its own flags.
type commandUnderTest struct {
	*cobra.Command
	maskV4 *int32
}

// start runs the command with args until the test ends (closing stop);
// ended reports whether it returned, and its error.
func (c *commandUnderTest) start(t *testing.T, stop chan struct{}, args ...string) (ended func() (bool, error)) {
	t.Helper()
	c.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- c.Execute() }()
	var (
		finished bool
		err      error
	)
	t.Cleanup(func() {
		close(stop)
		if finished {
			return
		}
		select {
		case err := <-done:
			if err != nil {
				t.Logf("the command ended: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the command did not stop")
		}
	})
	return func() (bool, error) {
		if !finished {
			select {
			case err = <-done:
				finished = true
			default:
			}
		}
		return finished, err
	}
}
