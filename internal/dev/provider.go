package dev

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/providers/local"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ProviderName is the provider `outrigger dev` runs Outrigger with: the sim
// cloud's instances and routes, with the local provider's load balancers,
// so that a LoadBalancer Service gets a VIP on this machine that answers.
const ProviderName = "dev"

// config is the dev provider's cloud-config: each part is the named
// provider's own.
type config struct {
	Sim   json.RawMessage `json:"sim"`
	Local json.RawMessage `json:"local,omitempty"`
}

// devProvider is the sim provider with the local provider's load balancers.
type devProvider struct {
	*sim.Provider
	local cloudprovider.Interface
	pool  netip.Prefix
}

// NewProvider is the dev provider's factory.
func NewProvider(r io.Reader) (cloudprovider.Interface, error) {
	var cfg config
	present, err := provider.DecodeConfig(r, &cfg)
	switch {
	case err != nil:
		return nil, err
	case !present:
		return nil, errors.New("the dev provider needs --cloud-config with a sim: and a local: section")
	}
	s, err := sim.New(bytes.NewReader(cfg.Sim))
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	l, err := local.New(bytes.NewReader(cfg.Local))
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	pool, err := local.Pool(bytes.NewReader(cfg.Local))
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return &devProvider{Provider: s.(*sim.Provider), local: l, pool: pool}, nil
}

// ConsoleRanges shows the local load balancers' VIP pool on the console.
func (p *devProvider) ConsoleRanges() []console.Range {
	return []console.Range{{Name: "local-lb-pool", Prefix: p.pool}}
}

// Initialize implements cloudprovider.Interface.
func (p *devProvider) Initialize(b cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	p.Provider.Initialize(b, stop)
	p.local.Initialize(b, stop)
}

// LoadBalancer implements cloudprovider.Interface with the local provider.
func (p *devProvider) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	return p.local.LoadBalancer()
}

// ProviderName implements cloudprovider.Interface.
func (p *devProvider) ProviderName() string { return ProviderName }
