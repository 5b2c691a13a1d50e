// Package providers holds the providers that ship with Outrigger (local,
// sim). The registry that maps --cloud-provider names to factories is in
// package provider; the names here keep existing main.go files building.
package providers

import "github.com/outrigger-ccm/outrigger/pkg/provider"

// Factory is provider.Factory.
type Factory = provider.Factory

// Registry is provider.Registry.
type Registry = provider.Registry

// NewRegistry is provider.NewRegistry.
func NewRegistry() *Registry { return provider.NewRegistry() }
