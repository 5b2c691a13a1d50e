package manager

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/platform"
	contract "github.com/outrigger-ccm/outrigger/pkg/provider"
	"github.com/outrigger-ccm/outrigger/pkg/providers"
)

// ProvidersFile is the --cloud-providers-file: the providers one Outrigger
// runs side by side, each serving its own nodes (by providerID scheme) and
// its own LoadBalancer Services (by spec.loadBalancerClass).
type ProvidersFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Providers, at least one. Services without a class go to the one
	// provider without a LoadBalancerClass, if any.
	Providers []ProviderEntry `json:"providers"`
}

// ProviderEntry is one provider of a ProvidersFile.
type ProviderEntry struct {
	// Name is the provider's --cloud-provider name.
	Name string `json:"name"`
	// CloudConfig is the path of its cloud-config (its --cloud-config).
	CloudConfig string `json:"cloudConfig,omitempty"`
	// Platforms are the providerID schemes of its nodes. Default: those
	// the provider states (provider.Platforms); one of the two is needed.
	Platforms []string `json:"platforms,omitempty"`
	// LoadBalancerClass is the spec.loadBalancerClass of its Services;
	// empty: the Services without a class.
	LoadBalancerClass string `json:"loadBalancerClass,omitempty"`
}

// The ProvidersFile's apiVersion and kind.
const (
	ProvidersAPIVersion = "outrigger.io/v1alpha1"
	ProvidersKind       = "CloudProviders"
)

// unit is one provider with what it serves and its own call layer: its own
// limits, metrics labelled with its name.
type unit struct {
	name      string
	provider  cloudprovider.Interface
	platforms platform.Set
	class     string
	// tag is added to controller names and Event sources ("" when the
	// provider runs alone, so names are upstream's).
	tag   string
	layer *cloud.Layer
	init  *providerInit
}

// buildUnits builds the providers to run: the one --cloud-provider names,
// or those of --cloud-providers-file. Errors say what to fix in one line.
func buildUnits(opts *Options, reg *providers.Registry) ([]*unit, error) {
	if opts.CloudProvidersFile == "" {
		p, err := buildProvider(opts, reg)
		if err != nil {
			return nil, err
		}
		if err := checkPlatforms(p, opts.CloudProvider, opts.CloudProviderPlatforms, "--cloud-provider-platforms"); err != nil {
			return nil, err
		}
		platforms, _ := platform.Parse(opts.CloudProviderPlatforms) // validated
		return []*unit{{name: opts.CloudProvider, provider: p, platforms: platforms, class: opts.LoadBalancerClass}}, nil
	}
	file, err := readProvidersFile(opts.CloudProvidersFile)
	if err != nil {
		return nil, err
	}
	units := make([]*unit, 0, len(file.Providers))
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
			if stated, ok := p.(contract.Platforms); ok {
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
		units = append(units, &unit{name: e.Name, provider: p, platforms: platforms, class: e.LoadBalancerClass, tag: e.Name})
	}
	return units, nil
}

// readProvidersFile reads and checks a --cloud-providers-file: the
// providers named once each, no scheme or class claimed twice.
func readProvidersFile(path string) (*ProvidersFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read --cloud-providers-file: %w", err)
	}
	var f ProvidersFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("--cloud-providers-file %s: %w", path, err)
	}
	if f.APIVersion != ProvidersAPIVersion || f.Kind != ProvidersKind {
		return nil, fmt.Errorf("--cloud-providers-file %s: apiVersion %q and kind %q; want %s and %s", path, f.APIVersion, f.Kind, ProvidersAPIVersion, ProvidersKind)
	}
	if len(f.Providers) == 0 {
		return nil, fmt.Errorf("--cloud-providers-file %s names no providers", path)
	}
	var errs []error
	names := map[string]bool{}
	schemes := map[string]string{}
	classes := map[string]string{}
	for _, e := range f.Providers {
		switch {
		case e.Name == "":
			errs = append(errs, fmt.Errorf("--cloud-providers-file %s: a provider without a name", path))
			continue
		case names[e.Name]:
			errs = append(errs, fmt.Errorf("--cloud-providers-file %s: provider %q is named twice", path, e.Name))
			continue
		}
		names[e.Name] = true
		if _, err := platform.Parse(e.Platforms); err != nil {
			errs = append(errs, fmt.Errorf("--cloud-providers-file %s: provider %q: platforms: %w", path, e.Name, err))
		}
		for _, s := range e.Platforms {
			if other, ok := schemes[s]; ok {
				errs = append(errs, fmt.Errorf("--cloud-providers-file %s: providers %q and %q both claim the providerID scheme %q", path, other, e.Name, s))
			}
			schemes[s] = e.Name
		}
		if e.LoadBalancerClass != "" {
			for _, msg := range validation.IsQualifiedName(e.LoadBalancerClass) {
				errs = append(errs, fmt.Errorf("--cloud-providers-file %s: provider %q: loadBalancerClass %q: %s", path, e.Name, e.LoadBalancerClass, msg))
			}
		}
		if other, ok := classes[e.LoadBalancerClass]; ok {
			what := fmt.Sprintf("the loadBalancerClass %q", e.LoadBalancerClass)
			if e.LoadBalancerClass == "" {
				what = "the Services without a class (give all but one a loadBalancerClass)"
			}
			errs = append(errs, fmt.Errorf("--cloud-providers-file %s: providers %q and %q both claim %s", path, other, e.Name, what))
		}
		classes[e.LoadBalancerClass] = e.Name
	}
	if err := oneLine(errs); err != nil {
		return nil, err
	}
	return &f, nil
}

// checkUnits refuses schemes claimed twice once the providers have said
// which they serve (a scheme a provider states, and another lists).
func checkUnits(units []*unit) error {
	owner := map[string]string{}
	for _, u := range units {
		for _, s := range u.platforms.Schemes() {
			if other, ok := owner[s]; ok {
				return fmt.Errorf("--cloud-providers-file: providers %q and %q both serve the providerID scheme %q: list each one's platforms", other, u.name, s)
			}
			owner[s] = u.name
		}
	}
	return nil
}

// allPlatforms is every scheme the units serve together; the zero Set (all
// nodes) when one provider runs alone without platforms.
func allPlatforms(units []*unit) platform.Set {
	if len(units) == 1 {
		return units[0].platforms
	}
	var all []string
	for _, u := range units {
		all = append(all, u.platforms.Schemes()...)
	}
	slices.Sort(all)
	set, _ := platform.Parse(slices.Compact(all)) // each parsed before
	return set
}

// checkPlatforms refuses platforms naming a scheme the provider says it
// does not serve (provider.Platforms). flag names where they were given.
func checkPlatforms(p cloudprovider.Interface, name string, schemes []string, flag string) error {
	served, ok := p.(contract.Platforms)
	if !ok {
		return nil
	}
	for _, scheme := range schemes {
		if !slices.Contains(served.Platforms(), scheme) {
			return fmt.Errorf("%s names %q, but provider %q serves only the providerID schemes %v", flag, scheme, name, served.Platforms())
		}
	}
	return nil
}
