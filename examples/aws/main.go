// Command aws-ccm is Outrigger running the upstream AWS provider,
// k8s.io/cloud-provider-aws, unchanged.
package main

import (
	"io"
	"os"

	cloudprovider "k8s.io/cloud-provider"
	awsv1 "k8s.io/cloud-provider-aws/pkg/providers/v1"

	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func main() {
	os.Exit(manager.Main(registry()))
}

// registry holds the AWS provider under "aws". Importing awsv1 registers its
// factory in upstream's global registry (an init()); it is taken from there.
func registry() *provider.Registry {
	reg := provider.NewRegistry()
	reg.Register(awsv1.ProviderName, func(config io.Reader) (cloudprovider.Interface, error) {
		return cloudprovider.GetCloudProvider(awsv1.ProviderName, config)
	})
	return reg
}
