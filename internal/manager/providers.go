package manager

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
	"github.com/outrigger-ccm/outrigger/internal/platform"
	"github.com/outrigger-ccm/outrigger/internal/providersfile"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// configuredProvider is one provider with what it serves and its own call
// layer: its own limits, metrics labelled with its name.
type configuredProvider struct {
	name      string
	provider  cloudprovider.Interface
	platforms platform.Set
	// classes are the load balancer classes it serves ("": Services
	// without a class), one service controller each.
	classes []string
	// tag is added to controller names and Event sources ("" when the
	// provider runs alone, so names are upstream's).
	tag   string
	layer *cloud.Layer
	init  *providerInit
}

// configureProviders builds the providers to run: the one --cloud-provider
// names, or those of --cloud-providers-file. Errors say what to fix in one
// line.
func configureProviders(opts *Options, reg *provider.Registry) ([]*configuredProvider, error) {
	if opts.CloudProvidersFile == "" {
		p, err := buildProvider(opts, reg)
		if err != nil {
			return nil, err
		}
		if err := checkPlatforms(p, opts.CloudProvider, opts.CloudProviderPlatforms, "--cloud-provider-platforms"); err != nil {
			return nil, err
		}
		platforms, _ := platform.Parse(opts.CloudProviderPlatforms) // validated
		return []*configuredProvider{{name: opts.CloudProvider, provider: p, platforms: platforms, classes: []string{opts.LoadBalancerClass}}}, nil
	}
	file, err := providersfile.Read(opts.CloudProvidersFile)
	if err != nil {
		return nil, err
	}
	configured := make([]*configuredProvider, 0, len(file.Providers))
	for i, e := range file.Providers {
		where := fmt.Sprintf("--cloud-providers-file %s: provider %q", opts.CloudProvidersFile, e.Name)
		var config io.Reader
		if e.CloudConfig != "" {
			data, err := os.ReadFile(e.CloudConfig)
			if err != nil {
				return nil, fmt.Errorf("%s: cannot read its cloudConfig: %w", where, err)
			}
			config = bytes.NewReader(data)
		}
		p, err := reg.New(e.Name, config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		schemes := e.Platforms
		if len(schemes) == 0 {
			if stated, ok := p.(provider.Platforms); ok {
				schemes = stated.Platforms()
			}
		}
		if len(schemes) == 0 {
			return nil, fmt.Errorf("%s states no providerID schemes: list its platforms", where)
		}
		if err := checkPlatforms(p, e.Name, schemes, fmt.Sprintf("--cloud-providers-file providers[%d].platforms", i)); err != nil {
			return nil, err
		}
		platforms, err := platform.Parse(schemes)
		if err != nil {
			return nil, fmt.Errorf("%s: platforms: %w", where, err)
		}
		configured = append(configured, &configuredProvider{name: e.Name, provider: p, platforms: platforms, classes: e.Classes(), tag: e.Name})
	}
	return configured, nil
}

// checkSchemes refuses schemes claimed twice once the providers have said
// which they serve (a scheme a provider states, and another lists).
func checkSchemes(configured []*configuredProvider) error {
	owner := map[string]string{}
	for _, u := range configured {
		for _, s := range u.platforms.Schemes() {
			if other, ok := owner[s]; ok {
				return fmt.Errorf("--cloud-providers-file: providers %q and %q both serve the providerID scheme %q: list each one's platforms", other, u.name, s)
			}
			owner[s] = u.name
		}
	}
	return nil
}

// allPlatforms is every scheme the configured serve together; the zero Set (all
// nodes) when one provider runs alone without platforms.
func allPlatforms(configured []*configuredProvider) platform.Set {
	return descriptor.AllPlatforms(providers(configured))
}

// checkPlatforms refuses platforms naming a scheme the provider says it
// does not serve (provider.Platforms). flag names where they were given.
func checkPlatforms(p cloudprovider.Interface, name string, schemes []string, flag string) error {
	served, ok := p.(provider.Platforms)
	if !ok || len(served.Platforms()) == 0 { // none stated (a plugin that does not say)
		return nil
	}
	for _, scheme := range schemes {
		if !slices.Contains(served.Platforms(), scheme) {
			return fmt.Errorf("%s names %q, but provider %q serves only the providerID schemes %v", flag, scheme, name, served.Platforms())
		}
	}
	return nil
}

// buildProvider builds the provider --cloud-provider names, from
// --cloud-config or, in tenant mode, the tenant's own configuration.
func buildProvider(opts *Options, reg *provider.Registry) (cloudprovider.Interface, error) {
	var config io.Reader
	if t := opts.tenant; t != nil && len(t.cloudConfig) > 0 {
		// The tenant's own, from its Secret: its credentials never pass
		// through a file another tenant could name.
		config = bytes.NewReader(t.cloudConfig)
	} else if opts.CloudConfig != "" {
		f, err := os.Open(opts.CloudConfig)
		if err != nil {
			return nil, fmt.Errorf("cannot read --cloud-config: %w", err)
		}
		defer f.Close()
		config = f
	}
	return reg.New(opts.CloudProvider, config)
}
