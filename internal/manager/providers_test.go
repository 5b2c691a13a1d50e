package manager

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// platformsFake is a provider that states the schemes it serves.
type platformsFake struct {
	*fakecloud.Cloud
	schemes []string
}

func (p platformsFake) Platforms() []string { return p.schemes }

func fakeRegistry() *provider.Registry {
	reg := provider.NewRegistry()
	for name, schemes := range map[string][]string{"aws": {"aws"}, "metal": {"metal"}, "silent": nil} {
		reg.Register(name, func(io.Reader) (cloudprovider.Interface, error) {
			f := &fakecloud.Cloud{Provider: name}
			if schemes == nil {
				return f, nil
			}
			return platformsFake{Cloud: f, schemes: schemes}, nil
		})
	}
	return reg
}

// Bad --cloud-providers-file contents are refused with one line that says
// what to fix.
func TestProvidersFileRefusals(t *testing.T) {
	const head = "apiVersion: outrigger.dev/v1alpha1\nkind: CloudProviders\n"
	tests := []struct {
		name, file, wantErr string
	}{
		{"named twice", head + "providers: [{name: aws}, {name: aws, loadBalancerClass: example.com/b}]", `provider "aws" is named twice`},
		{"scheme claimed twice", head + "providers: [{name: aws, platforms: [aws]}, {name: metal, platforms: [aws], loadBalancerClass: example.com/m}]", `providers "aws" and "metal" both claim the providerID scheme "aws"`},
		{"class-less twice", head + "providers: [{name: aws}, {name: metal}]", `both claim the Services without a class`},
		{"class twice", head + "providers: [{name: aws, loadBalancerClass: example.com/x}, {name: metal, loadBalancerClass: example.com/x}]", `both claim the loadBalancerClass "example.com/x"`},
		{"class twice among several", head + "providers: [{name: aws, loadBalancerClasses: [example.com/a, example.com/x]}, {name: metal, loadBalancerClass: example.com/x}]", `providers "aws" and "metal" both claim the loadBalancerClass "example.com/x"`},
		{"malformed class among several", head + "providers: [{name: aws, loadBalancerClasses: [example.com/a, 'bad class']}]", `loadBalancerClass "bad class"`},
		{"malformed class", head + "providers: [{name: aws, loadBalancerClass: 'not a/class/at all'}]", `loadBalancerClass "not a/class/at all"`},
		{"malformed platform", head + "providers: [{name: aws, platforms: ['aws://x']}]", `platforms`},
		{"scheme the provider does not serve", head + "providers: [{name: aws, platforms: [gce]}]", `names "gce", but provider "aws" serves only the providerID schemes [aws]`},
		{"no schemes stated or listed", head + "providers: [{name: silent}]", `provider "silent" states no providerID schemes: list its platforms`},
		{"unknown provider", head + "providers: [{name: nosuch}]", `nosuch`},
		{"unknown field", head + "providers: [{name: aws, balancerClass: example.com/x}]", `unknown field "balancerClass"`},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\nproviders: [{name: aws}]", `want outrigger.dev/v1alpha1 and CloudProviders`},
		{"no providers", head + "providers: []", `names no providers`},
		{"missing cloudConfig", head + "providers: [{name: aws, cloudConfig: /nonexistent/aws.conf}]", `cannot read its cloudConfig`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "providers.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := NewOptions()
			opts.CloudProvidersFile = path
			configured, err := configureProviders(opts, fakeRegistry())
			if err == nil {
				err = checkSchemes(configured)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v; want one line containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestProvidersFileBuildsOneUnitEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "providers.yaml")
	// Written for an earlier release: the deprecated apiVersion is still read.
	file := "apiVersion: outrigger.io/v1alpha1\nkind: CloudProviders\nproviders:\n- name: aws\n- name: silent\n  platforms: [kwok]\n  loadBalancerClass: example.com/kwok\n  loadBalancerClasses: [example.com/kwok-internal]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := NewOptions()
	opts.CloudProvidersFile = path
	configured, err := configureProviders(opts, fakeRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchemes(configured); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, u := range configured {
		got = append(got, u.name+" "+strings.Join(u.platforms.Schemes(), ",")+" "+strings.Join(u.classes, ",")+" "+u.tag)
	}
	want := []string{"aws aws  aws", "silent kwok example.com/kwok,example.com/kwok-internal silent"}
	if strings.Join(got, ";") != strings.Join(want, ";") {
		t.Errorf("configured %q, want %q", got, want)
	}
	if all := allPlatforms(configured).Schemes(); strings.Join(all, ",") != "aws,kwok" {
		t.Errorf("all platforms %v, want aws,kwok", all)
	}
}

func TestProvidersFileExcludesTheSingleProviderFlags(t *testing.T) {
	opts := NewOptions()
	opts.CloudProvidersFile = "providers.yaml"
	opts.CloudProvider = "aws"
	opts.LoadBalancerClass = "example.com/x"
	err := opts.Validate()
	if err == nil || !strings.Contains(err.Error(), "--cloud-provider and --cloud-providers-file do not go together") ||
		!strings.Contains(err.Error(), "--load-balancer-class and --cloud-providers-file do not go together") {
		t.Fatalf("err = %v", err)
	}
}
