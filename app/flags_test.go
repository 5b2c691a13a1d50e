package app_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	cloudprovider "k8s.io/cloud-provider"
	upstreamapp "k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/outrigger-ccm/outrigger/app"
)

// Several commands run in this process, each applying the logging flags
// as a process does once.
func init() { logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged }

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
	t.Run("conflict with an upstream flag", func(t *testing.T) {
		// As upstream's command: a provider's flag named as one of
		// upstream's is left out, upstream's parses the value.
		var name int
		_, run := command(t, nil, func(fs *pflag.FlagSet) {
			fs.IntVar(&name, "cluster-name", 7, "Of another type.")
		})
		if err := run("--cluster-name=blue", "--version"); err != nil {
			t.Fatal(err)
		}
		if name != 7 {
			t.Errorf("the provider's --cluster-name = %d, want its default 7", name)
		}
	})
	t.Run("true collision", func(t *testing.T) {
		var timeout string
		_, run := command(t, nil, func(fs *pflag.FlagSet) {
			fs.StringVar(&timeout, "cloud-call-timeout", "forever", "The cloud SDK's own timeout mode.")
		})
		err := run("--cloud-provider=x")
		if err == nil || !strings.Contains(err.Error(), "flag --cloud-call-timeout is defined twice: by Outrigger (duration") ||
			!strings.Contains(err.Error(), "by the provider's main (string") || strings.Contains(err.Error(), "\n") {
			t.Errorf("err = %v, want one line naming the flag and both owners", err)
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

// TestOutriggerFlagsYield: a name Outrigger has and upstream's
// cloud-controller-manager has not belongs to a provider that defines it,
// of any type, in its additional flags (GCP's Int32Var) or on
// command.Flags() once the command is built (Linode's IntVar, which made
// pflag panic "flag redefined"). Outrigger reads a value it understands.
func TestOutriggerFlagsYield(t *testing.T) {
	t.Run("additional flags of another type", func(t *testing.T) {
		var mask int32
		out, run := command(t, nil, func(fs *pflag.FlagSet) {
			fs.Int32Var(&mask, "node-cidr-mask-size-ipv4", 24, "GCP's own.")
		})
		if err := run("--node-cidr-mask-size-ipv4=26", "--version"); err != nil {
			t.Fatal(err)
		}
		if mask != 26 {
			t.Errorf("the provider's mask = %d, want 26", mask)
		}
		out.Reset()
		if err := run("--help"); err != nil {
			t.Fatal(err)
		}
		help := out.String()
		if n := strings.Count(help, "--node-cidr-mask-size-ipv4"); n != 1 || !strings.Contains(help, "GCP's own.") {
			t.Errorf("--help shows --node-cidr-mask-size-ipv4 %d times, want once, the provider's:\n%s", n, help)
		}
	})
	t.Run("on the command after it is built", func(t *testing.T) {
		s, err := options.NewCloudControllerManagerOptions()
		if err != nil {
			t.Fatal(err)
		}
		cmd := app.NewCloudControllerManagerCommand(s, noCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, make(chan struct{}))
		var v4, v6 int
		cmd.Flags().IntVar(&v4, "node-cidr-mask-size-ipv4", 0, "Linode's own.")
		cmd.Flags().IntVar(&v6, "node-cidr-mask-size-ipv6", 0, "Linode's own.")
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--node-cidr-mask-size-ipv4=25", "--version"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if v4 != 25 || v6 != 0 {
			t.Errorf("the provider's masks = %d, %d, want 25, 0", v4, v6)
		}
	})
}

// TestErrorPrintedOnce: the command prints its error once to its stderr,
// for mains that exit 1 without printing (GCP's, hcloud's), whether a
// flag, the options or the run failed, and whatever SilenceErrors says.
func TestErrorPrintedOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		silence bool
		args    []string
		want    string
	}{
		{"bad flag", false, []string{"--node-monitor-period=soon"}, `invalid argument "soon"`},
		{"bad flag, errors silenced by the main", true, []string{"--node-monitor-period=soon"}, `invalid argument "soon"`},
		{"bad options", true, []string{"--cloud-provider=x", "--controllers=*,tagging"}, `unknown controller "tagging"`},
		{"argument", false, []string{"extra"}, `unknown command "extra"`},
		{"run", true, []string{"--cloud-provider=x", "--kubeconfig=/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := options.NewCloudControllerManagerOptions()
			if err != nil {
				t.Fatal(err)
			}
			cmd := app.NewCloudControllerManagerCommand(s, noCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, make(chan struct{}))
			cmd.SilenceErrors = tc.silence
			var stdout, stderr bytes.Buffer
			cmd.SetOut(&stdout)
			cmd.SetErr(&stderr)
			cmd.SetArgs(tc.args)
			if err := cmd.Execute(); err == nil {
				t.Fatal("the command succeeded")
			}
			if n := strings.Count(stderr.String(), "Error: "); n != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr has %d errors, want one saying %q:\n%s", n, tc.want, stderr.String())
			}
		})
	}
}

// TestNoNodeIPAMByDefault: the default controllers are upstream's four;
// node IPAM is not among them, so the IPAM flags are the provider's, as
// Linode's main reads them: --allocate-node-cidrs with its own mask flags
// left at 0 starts (and fails only at the missing kubeconfig here).
func TestNoNodeIPAMByDefault(t *testing.T) {
	if got, want := app.ControllerNames(app.DefaultInitFuncConstructors), upstreamapp.ControllerNames(upstreamapp.DefaultInitFuncConstructors); !slices.Equal(got, want) {
		t.Errorf("default controllers %v, want upstream's %v", got, want)
	}
	s, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	cmd := app.NewCloudControllerManagerCommand(s, noCloud, app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, make(chan struct{}))
	var v4, v6 int
	cmd.Flags().IntVar(&v4, "node-cidr-mask-size-ipv4", 0, "Linode's own.")
	cmd.Flags().IntVar(&v6, "node-cidr-mask-size-ipv6", 0, "Linode's own.")
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--cloud-provider=linode", "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16", "--kubeconfig=/nonexistent/kubeconfig"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "/nonexistent/kubeconfig") {
		t.Errorf("err = %v, want only the missing kubeconfig", err)
	}
}

// TestClusterCIDRForRoutes: without node IPAM, --cluster-cidr is still
// the route controller's, and a malformed one stops the command.
func TestClusterCIDRForRoutes(t *testing.T) {
	_, run := command(t, nil, nil)
	err := run("--cloud-provider=x", "--cluster-cidr=not-a-cidr")
	if err == nil || !strings.Contains(err.Error(), "not-a-cidr") {
		t.Errorf("err = %v, want one about --cluster-cidr", err)
	}
}

// TestBuilderWebhookNames: --webhooks knows the webhooks registered with
// CommandBuilder, and only those.
func TestBuilderWebhookNames(t *testing.T) {
	b := app.NewBuilder()
	b.RegisterDefaultControllers()
	b.RegisterWebhook("no-foo", app.WebhookConfig{Path: "/validate"})
	b.SetCloudInitializer(noCloud)
	cmd := b.BuildCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--cloud-provider=x", "--webhooks=no-foo,-other"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `unknown webhook "-other" (this build has no-foo)`) || strings.Contains(err.Error(), `"no-foo"`) {
		t.Errorf("err = %v, want only -other unknown", err)
	}
}
