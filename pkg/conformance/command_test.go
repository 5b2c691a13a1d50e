package conformance

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

type schemed struct {
	*fakecloud.Cloud
	scheme string
}

func (s schemed) Platforms() []string { return []string{s.scheme} }

// `outrigger conformance --cloud-providers-file` checks each listed
// provider, each under its own name in the text and the JUnit report.
func TestConformanceOfEachProviderInAFile(t *testing.T) {
	reg := provider.NewRegistry()
	for _, name := range []string{"alpha", "beta"} {
		reg.Register(name, func(io.Reader) (cloudprovider.Interface, error) {
			return schemed{Cloud: &fakecloud.Cloud{Provider: name}, scheme: name}, nil
		})
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "providers.yaml")
	junit := filepath.Join(dir, "junit.xml")
	if err := os.WriteFile(file, []byte("apiVersion: outrigger.dev/v1alpha1\nkind: CloudProviders\nproviders:\n- name: alpha\n- name: beta\n  loadBalancerClass: example.com/beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := NewCommand(reg)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--cloud-providers-file=" + file, "--junit=" + junit})
	_ = cmd.Execute() // the fake provider fails some cases; what is checked is whom
	text := out.String()
	for _, want := range []string{`Provider "alpha"`, `Provider "beta"`} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %s:\n%s", want, text)
		}
	}
	report, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`name="outrigger-conformance/alpha/Identity"`, `name="outrigger-conformance/beta/Identity"`} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("JUnit report lacks the suite %s", want)
		}
	}
}

func TestConformanceRefusesBothProviderFlags(t *testing.T) {
	cmd := NewCommand(provider.NewRegistry())
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"--cloud-provider=sim", "--cloud-providers-file=x.yaml"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "do not go together") {
		t.Fatalf("err = %v", err)
	}
}
