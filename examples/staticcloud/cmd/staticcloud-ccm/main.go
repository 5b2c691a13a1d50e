// Command staticcloud-ccm is a cloud-controller-manager for staticcloud.
package main

import (
	"os"

	"github.com/outrigger-ccm/outrigger/examples/staticcloud"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func main() {
	reg := provider.NewRegistry()
	reg.Register(staticcloud.Name, staticcloud.New)
	os.Exit(manager.Main(reg))
}
