//go:build integration

package app_test

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/fake"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/app"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// fakeCloud is upstream's fake with instances only, every node answered
// as fake://<name>.
func fakeCloud() *fake.Cloud {
	return &fake.Cloud{EnableInstancesV2: true, ExistsByProviderID: true, DisableRoutes: true, DisableLoadBalancers: true,
		ExternalIP: net.ParseIP("198.18.100.1"),
		OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			return &cloudprovider.InstanceMetadata{ProviderID: "fake://" + n.Name,
				NodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.100.11"}}}, nil
		}}
}

// startCommand runs a provider's command against the package's API server
// with its own leader-election Lease and no secure port, stopping it when
// the test ends; ended reports whether the command has returned, and its
// error.
func startCommand(t *testing.T, cmd *cobra.Command, stop chan struct{}, args ...string) (ended func() (bool, error)) {
	t.Helper()
	cmd.SetArgs(append([]string{"--kubeconfig=" + testenv.Kubeconfig, "--leader-elect-resource-name=" + testenv.Name("app"),
		"--secure-port=0"}, args...))
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = cmd.Execute()
	}()
	t.Cleanup(func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the command did not stop")
		}
	})
	return func() (bool, error) {
		select {
		case <-done:
			return true, err
		default:
			return false, nil
		}
	}
}

// helpOf runs the command with --help and returns what it printed.
func helpOf(t *testing.T, cmd *cobra.Command) string {
	t.Helper()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("--help: %v", err)
	}
	return out.String()
}

// untagged is a cloud without a cluster ID, as DigitalOcean's.
type untagged struct{ *fake.Cloud }

func (untagged) HasClusterID() bool { return false }

// TestNoClusterIDRuns: a cloud whose HasClusterID is false runs without
// --allow-untagged-cloud, as under upstream's app.Run, which leaves that
// check to the cloud initializer (DigitalOcean's makes none).
func TestNoClusterIDRuns(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	cloudInit := func(*config.CompletedConfig) cloudprovider.Interface { return untagged{fakeCloud()} }
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(s, cloudInit, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	ended := startCommand(t, cmd, stop, "--cloud-provider=digitalocean")
	node := testenv.Name("untagged-node")
	testenv.CreateNode(t, node, nil)
	testenv.Eventually(t, 60*time.Second, "the node initialized", func() (bool, error) {
		if done, err := ended(); done {
			t.Fatalf("the command ended: %v", err)
		}
		return testenv.GetNode(t, node).Spec.ProviderID == "fake://"+node, nil
	})
}
