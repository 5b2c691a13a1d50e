//go:build product

package main

import "github.com/spf13/cobra"

// devCommands is empty in the product build: see dev.go.
func devCommands() []*cobra.Command { return nil }
