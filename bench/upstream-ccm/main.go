// Command upstream-ccm is the upstream cloud-controller-manager
// (k8s.io/cloud-provider/app, its own command and controllers, unchanged)
// with Outrigger's sim provider and the benchmarks' upstream fake registered, so the benchmarks run both CCMs
// on the same provider code, cloud and control plane. It is a module of its
// own: the product module never depends on upstream's app.
package main

import (
	"io"
	"os"

	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
)

func main() {
	// Upstream finds providers in its global registry.
	cloudprovider.RegisterCloudProvider(sim.ProviderName, func(config io.Reader) (cloudprovider.Interface, error) {
		return sim.New(config)
	})
	cloudprovider.RegisterCloudProvider(upstreamfake.ProviderName, upstreamfake.New)
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		klog.Fatalf("upstream-ccm: options: %v", err)
	}
	cmd := app.NewCloudControllerManagerCommand(opts, newCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	os.Exit(cli.Run(cmd))
}

func newCloud(c *config.CompletedConfig) cloudprovider.Interface {
	shared := c.ComponentConfig.KubeCloudShared.CloudProvider
	cloud, err := cloudprovider.InitCloudProvider(shared.Name, shared.CloudConfigFile)
	if err != nil || cloud == nil {
		klog.Fatalf("upstream-ccm: provider %q: %v", shared.Name, err)
	}
	return cloud
}
