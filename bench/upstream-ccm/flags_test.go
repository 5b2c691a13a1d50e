package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// TestEveryUpstreamFlagIsAccepted builds the upstream cloud-controller-manager
// command from k8s.io/cloud-provider (the version in go.mod) and fails on any
// flag Outrigger does not accept, or accepts with another type or default, so
// an upstream manifest's arguments parse and mean the same.
func TestEveryUpstreamFlagIsAccepted(t *testing.T) {
	upstream := upstreamCommand(t)
	ours := manager.NewCommand(provider.NewRegistry())

	n := 0
	upstream.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return // cobra's own
		}
		n++
		o := ours.Flags().Lookup(f.Name)
		switch {
		case o == nil:
			t.Errorf("--%s (%s, default %q): not accepted", f.Name, f.Value.Type(), f.DefValue)
		case o.Value.Type() != f.Value.Type():
			t.Errorf("--%s: type %s, upstream %s", f.Name, o.Value.Type(), f.Value.Type())
		case o.DefValue != f.DefValue:
			t.Errorf("--%s: default %q, upstream %q", f.Name, o.DefValue, f.DefValue)
		case o.Shorthand != f.Shorthand:
			t.Errorf("--%s: shorthand %q, upstream %q", f.Name, o.Shorthand, f.Shorthand)
		}
	})
	if n < 80 {
		t.Fatalf("upstream has only %d flags: the test is not reading its command", n)
	}
}

// TestFeatureGatesMatchUpstream checks --feature-gates knows every gate the
// upstream CCM's does, so a manifest's gates parse.
func TestFeatureGatesMatchUpstream(t *testing.T) {
	upstream := upstreamCommand(t)
	ours := manager.NewCommand(provider.NewRegistry())
	gates := func(usage string) map[string]bool {
		out := map[string]bool{}
		for _, line := range strings.Split(usage, "\n") {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), "=true|false"); ok {
				out[name] = true
			}
		}
		return out
	}
	want := gates(upstream.Flags().Lookup("feature-gates").Usage)
	got := gates(ours.Flags().Lookup("feature-gates").Usage)
	if len(want) < 10 {
		t.Fatalf("read only %d upstream gates", len(want))
	}
	for g := range want {
		if !got[g] {
			t.Errorf("feature gate %s: not accepted", g)
		}
	}
}

// upstreamCommand is the upstream cloud-controller-manager's command, as
// its main builds it.
func upstreamCommand(t *testing.T) *cobra.Command {
	t.Helper()
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	return app.NewCloudControllerManagerCommand(opts, newCloud, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
}
