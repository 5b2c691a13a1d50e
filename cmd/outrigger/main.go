// Command outrigger is the Outrigger cloud-controller-manager with the
// providers that ship with it, plus the `conformance`, `console` and
// `gateway-dataplane` subcommands and,
// unless built with -tags product (as its container image is), `dev` and `sim`.
package main

import (
	"os"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/providers/local"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/conformance"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func main() {
	reg := provider.NewRegistry()
	reg.Register(plugin.ProviderName, plugin.NewProvider)
	reg.Register(local.ProviderName, local.New)
	reg.Register(sim.ProviderName, sim.New)
	os.Exit(manager.Main(reg, append(devCommands(), conformance.NewCommand(reg), console.NewCommand(), dataplane.NewCommand())...))
}
