// Command outrigger-ccm is Outrigger's command with the sim provider, the
// benchmarks' upstream fake (k8s.io/cloud-provider/fake) and the grpc
// provider registered, so that
// the benchmarks run Outrigger as a process of its own, as they run the
// upstream CCM (bench/upstream-ccm), on the same provider code: neither CCM
// shares a process, a heap or a collector with the benchmark's cloud and
// watchers.
package main

import (
	"os"

	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func main() {
	profileOnSignals()
	reg := provider.NewRegistry()
	reg.Register(plugin.ProviderName, plugin.NewProvider)
	reg.Register(sim.ProviderName, sim.New)
	reg.Register(upstreamfake.ProviderName, upstreamfake.New)
	os.Exit(manager.Main(reg))
}
