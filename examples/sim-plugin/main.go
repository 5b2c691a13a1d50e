// Command sim-plugin serves the sim provider as an Outrigger plugin: any
// cloudprovider.Interface becomes a plugin the same way.
package main

import (
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

func main() {
	plugin.Main(sim.New, plugin.Info{Version: "v0.1.0"})
}
