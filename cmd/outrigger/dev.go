//go:build !product

package main

import (
	"github.com/spf13/cobra"

	"github.com/outrigger-ccm/outrigger/pkg/dev"
)

// devCommands adds `outrigger dev`, the embedded default: it links envtest
// and the simulated kubelets, which a production image must not carry
// (envtest's init makes a directory under /tmp, which fails on the
// read-only root filesystem the Deployment asks for).
func devCommands() []*cobra.Command { return []*cobra.Command{dev.NewCommand()} }
