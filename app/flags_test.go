package app_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/app"
)

func noCloud(*config.CompletedConfig) cloudprovider.Interface { return nil }

// command builds a provider's command as a main.go would, with one
// additional flag section.
func command(t *testing.T, s *options.CloudControllerManagerOptions, extra func(*pflag.FlagSet)) (*bytes.Buffer, func(args ...string) error) {
	t.Helper()
	if s == nil {
		var err error
		if s, err = options.NewCloudControllerManagerOptions(); err != nil {
			t.Fatal(err)
		}
	}
	fss := cliflag.NamedFlagSets{}
	if extra != nil {
		extra(fss.FlagSet("my cloud"))
	}
	cmd := app.NewCloudControllerManagerCommand(s, noCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), fss, make(chan struct{}))
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	return &out, func(args ...string) error {
		cmd.SetArgs(args)
		return cmd.Execute()
	}
}

// TestAdditionalFlags: a provider's flags are in --help in their own
// section; one Outrigger also defines is one flag that both see; one of
// another type is a one-line error at start, not a panic.
func TestAdditionalFlags(t *testing.T) {
	t.Run("own section", func(t *testing.T) {
		var region string
		out, run := command(t, nil, func(fs *pflag.FlagSet) { fs.StringVar(&region, "region", "eu-1", "The cloud's region.") })
		if err := run("--help"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "My cloud flags:") || !strings.Contains(out.String(), "--region string") {
			t.Errorf("--help lacks the provider's section:\n%s", out)
		}
	})
	t.Run("shared flag of the same type", func(t *testing.T) {
		var mask int
		_, run := command(t, nil, func(fs *pflag.FlagSet) {
			fs.IntVar(&mask, "node-cidr-mask-size-ipv4", 26, "Linode's own.")
		})
		// --version stops before anything runs, after the flags are parsed.
		if err := run("--node-cidr-mask-size-ipv4=28", "--version"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("conflict", func(t *testing.T) {
		var mask string
		_, run := command(t, nil, func(fs *pflag.FlagSet) {
			fs.StringVar(&mask, "node-cidr-mask-size-ipv4", "26", "Of another type.")
		})
		err := run("--cloud-provider=x")
		if err == nil || !strings.Contains(err.Error(), "--node-cidr-mask-size-ipv4 is defined by Outrigger (int) and by the provider (string)") || strings.Contains(err.Error(), "\n") {
			t.Errorf("err = %v, want one line naming the flag and both types", err)
		}
	})
	t.Run("unknown controller", func(t *testing.T) {
		_, run := command(t, nil, nil)
		err := run("--cloud-provider=x", "--controllers=*,tagging")
		if err == nil || !strings.Contains(err.Error(), `unknown controller "tagging"`) {
			t.Errorf("err = %v, want unknown controller", err)
		}
	})
}

// TestProviderDefaults: defaults a provider set in the options it passes
// are Outrigger's defaults.
func TestProviderDefaults(t *testing.T) {
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	s.KubeCloudShared.ClusterName = "from-provider"
	out, run := command(t, s, nil)
	if err := run("--help"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `--cluster-name string`) || !strings.Contains(out.String(), `(default "from-provider")`) {
		t.Errorf("--help does not show the provider's default cluster name:\n%s", out)
	}
}
