package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// TestAWSAsPlugin serves the AWS provider with the plugin SDK, as
// plugin.Main would, and runs Outrigger against it over a unix socket: the
// provider's Initialize, which builds its Kubernetes client from the client
// builder, runs on Outrigger's first call, and the nodes are initialized
// through the plugin.
func TestAWSAsPlugin(t *testing.T) {
	_, _, simURL, instances := startCloud(t)
	dir := t.TempDir()
	useSimAWS(t, simURL)
	aws, err := cloudprovider.GetCloudProvider(awsv1.ProviderName, strings.NewReader(cloudConfig(simURL)))
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "unix://" + filepath.Join(dir, "plugin.sock")
	ln, err := plugin.ListenWith(endpoint, plugin.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- plugin.ServeWith(ctx, ln, aws, plugin.Info{Version: "test"}, plugin.ServeOptions{ClientBuilder: plugin.ClientBuilderFor(kubeconfig)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("plugin: %v", err)
		}
	})
	pluginConfig := filepath.Join(dir, "plugin.yaml")
	if err := os.WriteFile(pluginConfig, []byte("endpoint: "+endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, in := range instances {
		registerNode(t, in.Name)
	}
	reg := provider.NewRegistry()
	reg.Register(plugin.ProviderName, plugin.NewProvider)
	runOutriggerWith(t, reg, "--cloud-provider="+plugin.ProviderName, "--cloud-config="+pluginConfig, "--kubeconfig="+kubeconfig,
		"--controllers=cloud-node-controller", "--leader-elect=false", "--secure-port=0")
	for _, in := range instances {
		poll.Until(t, 60*time.Second, "node "+in.Name+" initialized through the plugin", func() bool {
			n := getNode(t, in.Name)
			return n.Spec.ProviderID == "aws:///"+in.Zone+"/"+in.ID && !hasTaint(n, cloudproviderapi.TaintExternalCloudProvider)
		})
	}
}
