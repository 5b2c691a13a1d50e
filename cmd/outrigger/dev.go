//go:build !product

package main

import (
	"github.com/spf13/cobra"

	"github.com/outrigger-ccm/outrigger/internal/dev"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcli"
)

// devCommands adds `outrigger dev`, the embedded default, and `outrigger
// sim`, the simulated cloud: they link envtest, the simulated kubelets and
// the sim cloud's server, which a production image must not carry
// (envtest's init makes a directory under /tmp, which fails on the
// read-only root filesystem the Deployment asks for).
func devCommands() []*cobra.Command { return []*cobra.Command{dev.NewCommand(), simcli.NewCommand()} }
