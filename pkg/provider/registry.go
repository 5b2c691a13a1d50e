package provider

import (
	"fmt"
	"io"
	"sort"
	"strings"

	cloudprovider "k8s.io/cloud-provider"
)

// Factory builds a provider from its cloud-config. config is nil when no
// --cloud-config was given. The signature is upstream's
// cloudprovider.Factory, so an existing provider's constructor registers
// unchanged.
type Factory = cloudprovider.Factory

// Registry maps --cloud-provider names to factories. A registry is an
// ordinary value made in main and handed to the manager: nothing is
// registered behind the caller's back by init() functions, so a binary
// contains exactly the providers its main.go names.
type Registry struct {
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]Factory{}}
}

// Register adds a provider. It panics on an empty name, a nil factory or a
// name registered twice: all three are programming errors in main.go that
// must not reach a cluster.
func (r *Registry) Register(name string, factory Factory) {
	if name == "" || factory == nil {
		panic("provider: Register needs a name and a factory")
	}
	if _, dup := r.factories[name]; dup {
		panic(fmt.Sprintf("provider: provider %q registered twice", name))
	}
	r.factories[name] = factory
}

// Names lists the registered providers, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.factories))
	for n := range r.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the named provider. An unknown name yields an error that lists
// the registered providers, since that is what the user needs to fix the flag.
func (r *Registry) New(name string, config io.Reader) (cloudprovider.Interface, error) {
	factory, ok := r.factories[name]
	if !ok {
		return nil, fmt.Errorf("unknown --cloud-provider %q: this binary has %s", name, r.describe())
	}
	p, err := factory(config)
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", name, err)
	}
	if p == nil {
		return nil, fmt.Errorf("provider %q: factory returned no provider and no error", name)
	}
	return p, nil
}

func (r *Registry) describe() string {
	names := r.Names()
	if len(names) == 0 {
		return "no providers registered"
	}
	return "providers " + strings.Join(names, ", ")
}
