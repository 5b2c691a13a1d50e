// Package providersfile reads the --cloud-providers-file: the providers
// one Outrigger runs side by side. It is the manager's wiring, not the
// provider contract: a provider never reads it.
package providersfile

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// File is the --cloud-providers-file: the providers one Outrigger
// runs side by side, each serving its own nodes (by providerID scheme) and
// its own LoadBalancer Services (by spec.loadBalancerClass).
type File struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Providers, at least one. Services without a class go to the one
	// provider without a LoadBalancerClass, if any.
	Providers []Entry `json:"providers"`
}

// Entry is one provider of a File.
type Entry struct {
	// Name is the provider's --cloud-provider name.
	Name string `json:"name"`
	// CloudConfig is the path of its cloud-config (its --cloud-config).
	CloudConfig string `json:"cloudConfig,omitempty"`
	// Platforms are the providerID schemes of its nodes. Default: those
	// the provider states (provider.Platforms); one of the two is needed.
	Platforms []string `json:"platforms,omitempty"`
	// LoadBalancerClass is the spec.loadBalancerClass of its Services;
	// empty (and no LoadBalancerClasses): the Services without a class.
	LoadBalancerClass string `json:"loadBalancerClass,omitempty"`
	// LoadBalancerClasses are more classes of its Services, for a
	// provider that serves several.
	LoadBalancerClasses []string `json:"loadBalancerClasses,omitempty"`
}

// Classes are the load balancer classes the provider serves: "" stands for
// the Services without a class, which a provider naming no class serves.
func (e Entry) Classes() []string {
	var out []string
	if e.LoadBalancerClass != "" {
		out = append(out, e.LoadBalancerClass)
	}
	out = append(out, e.LoadBalancerClasses...)
	if len(out) == 0 {
		return []string{""}
	}
	return out
}

// The file's apiVersion and kind. The apiVersion is in
// Outrigger's one label domain, outrigger.dev; files written for earlier
// releases (APIVersionDeprecated) are read as before.
const (
	APIVersion           = "outrigger.dev/v1alpha1"
	APIVersionDeprecated = "outrigger.io/v1alpha1"
	Kind                 = "CloudProviders"
)

// Read reads and checks a --cloud-providers-file: the
// providers named once each, no scheme or class claimed twice, every class
// and scheme well-formed. The error is one line that says what to fix.
func Read(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read --cloud-providers-file: %w", err)
	}
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("--cloud-providers-file %s: %w", path, err)
	}
	if (f.APIVersion != APIVersion && f.APIVersion != APIVersionDeprecated) || f.Kind != Kind {
		return nil, fmt.Errorf("--cloud-providers-file %s: apiVersion %q and kind %q; want %s and %s", path, f.APIVersion, f.Kind, APIVersion, Kind)
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
		for _, class := range e.Classes() {
			if class != "" {
				for _, msg := range validation.IsQualifiedName(class) {
					errs = append(errs, fmt.Errorf("--cloud-providers-file %s: provider %q: loadBalancerClass %q: %s", path, e.Name, class, msg))
				}
			}
			if other, ok := classes[class]; ok {
				what := fmt.Sprintf("the loadBalancerClass %q", class)
				if class == "" {
					what = "the Services without a class (give all but one a loadBalancerClass)"
				}
				errs = append(errs, fmt.Errorf("--cloud-providers-file %s: providers %q and %q both claim %s", path, other, e.Name, what))
			}
			classes[class] = e.Name
		}
	}
	if len(errs) > 0 {
		return nil, oneLine(errs)
	}
	return &f, nil
}

// oneLine joins errors into one error of one line.
func oneLine(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = strings.ReplaceAll(e.Error(), "\n", " ")
	}
	return errors.New(strings.Join(msgs, "; "))
}
