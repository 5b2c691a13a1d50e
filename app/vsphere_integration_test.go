//go:build integration

package app_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// vsphereName is the provider name the vSphere-shaped main presets.
const vsphereName = "vsphere-shaped"

func init() {
	cloudprovider.RegisterCloudProvider(vsphereName, func(io.Reader) (cloudprovider.Interface, error) {
		cloud := fakeCloud()
		cloud.DisableLoadBalancers = false
		return cloud, nil
	})
}

// vsphereMain is a main of vSphere's shape (its cmd/ at HEAD, read and
// written anew): a cobra command of its own holding upstream's flag
// sections, --cloud-provider preset through Flags().VisitAll, and a Run
// that builds the config from the options, initializes the cloud from the
// registry (refusing an untagged one unless --allow-untagged-cloud), and
// hands it to app.Run with the default controllers and no webhooks.
func vsphereMain(stop chan struct{}) *cobra.Command {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		panic(err)
	}
	cmd := &cobra.Command{Use: "vsphere-cloud-controller-manager", SilenceUsage: true}
	nfs := s.Flags(app.ControllerNames(app.DefaultInitFuncConstructors), app.ControllersDisabledByDefault.List(),
		names.CCMControllerAliases(), app.AllWebhooks, app.DisabledByDefaultWebhooks)
	for _, fs := range nfs.FlagSets {
		cmd.Flags().AddFlagSet(fs)
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "cloud-provider" {
			_ = f.Value.Set(vsphereName)
			f.DefValue = vsphereName
		}
	})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := s.Config(app.ControllerNames(app.DefaultInitFuncConstructors), app.ControllersDisabledByDefault.List(),
			names.CCMControllerAliases(), app.AllWebhooks, app.DisabledByDefaultWebhooks)
		if err != nil {
			return err
		}
		completed := c.Complete()
		shared := completed.ComponentConfig.KubeCloudShared
		cloud, err := cloudprovider.InitCloudProvider(shared.CloudProvider.Name, shared.CloudProvider.CloudConfigFile)
		if err != nil {
			return err
		}
		if cloud == nil {
			return errors.New("cloud provider is nil")
		}
		if !cloud.HasClusterID() && !shared.AllowUntaggedCloud {
			return errors.New("no ClusterID found")
		}
		initializers := app.ConstructControllerInitializers(app.DefaultInitFuncConstructors, completed, cloud)
		webhooks := app.NewWebhookHandlers(map[string]app.WebhookConfig{}, completed, cloud)
		return app.Run(completed, cloud, initializers, webhooks, stop)
	}
	return cmd
}

// freePort is a TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestVSphereShapedMain: a main of vSphere's shape compiles against app
// and, through app.Run, initializes nodes and provisions load balancers
// with the cloud it initialized itself, serves /healthz with a check per
// controller on the secure port its options bound, and returns nil once
// its stop channel closes.
func TestVSphereShapedMain(t *testing.T) {
	stop := make(chan struct{})
	cmd := vsphereMain(stop)
	port := freePort(t)
	cmd.SetArgs([]string{"--kubeconfig=" + testenv.Kubeconfig, "--leader-elect-resource-name=" + testenv.Name("vsphere"),
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--authentication-kubeconfig=" + testenv.Kubeconfig, "--authorization-kubeconfig=" + testenv.Kubeconfig})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	ended := func() (bool, error) {
		select {
		case err := <-done:
			return true, err
		default:
			return false, nil
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			close(stop)
			if err := <-done; err != nil {
				t.Logf("the command ended: %v", err)
			}
		}
	})

	waitInitialized(t, ended)
	waitLoadBalancer(t)

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the port's self-signed certificate
	// As upstream's, one /healthz, its verbose form naming each check.
	var body string
	testenv.Eventually(t, 30*time.Second, "every controller's check on /healthz", func() (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz?verbose", port))
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "[+]"+names.CloudNodeController+" ok") &&
			strings.Contains(body, "[+]"+names.ServiceLBController+" ok"), nil
	})
	t.Logf("/healthz?verbose:\n%s", body)
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/configz", port))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Served to the test's own (anonymous) request only if authorized: the
	// section's name, or the refusal, shows it is upstream's handler chain.
	if !strings.Contains(string(b), app.ConfigzName) && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /configz: %d %s", resp.StatusCode, b)
	}

	close(stop)
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("app.Run returned %v once stopped, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("app.Run did not return once its stop channel closed")
	}
}
