package manager

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	// --logging-format=json, as upstream's binaries register it.
	_ "k8s.io/component-base/logs/json/register"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// NewCommand returns the outrigger command: run with flags, it is the cloud
// controller manager; extra subcommands (dev, sim) are added by the caller.
func NewCommand(reg *provider.Registry, subcommands ...*cobra.Command) *cobra.Command {
	opts := NewOptions()
	cmd := NewCustomCommand(opts, CommandText{
		Use:   "outrigger",
		Short: "Outrigger is a Kubernetes cloud-controller-manager",
		Long: "Outrigger runs the cloud controllers of a Kubernetes cluster (node initialization, node lifecycle,\n" +
			"load balancers, routes, node IPAM) for the provider named by --cloud-provider. It accepts every flag of\n" +
			"the upstream cloud-controller-manager. Registered providers: " + fmt.Sprint(reg.Names()) + ".",
	}, cliflag.NamedFlagSets{}, func(ctx context.Context) error {
		return Run(ctx, opts, reg)
	})
	cmd.AddCommand(subcommands...)
	return cmd
}

// CommandText is what a command says of itself.
type CommandText struct {
	Use, Short, Long string
	// Yield makes Outrigger's own flags (those upstream's
	// cloud-controller-manager has not) give way to a flag of the same
	// name that the caller adds, in extra or on cmd.Flags() once the
	// command is built, as a provider's main does; Options.TakeYielded
	// then reads the provider's value.
	Yield bool
}

// NewCustomCommand is the command of NewCommand around another run: opts
// are bound to its flags, extra adds flag sections after Outrigger's (no
// name twice), and run is called once logging is set up from the flags.
// Package app builds a provider's own command with it.
func NewCustomCommand(opts *Options, text CommandText, extra cliflag.NamedFlagSets, run func(context.Context) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:           text.Use,
		Short:         text.Short,
		Long:          text.Long,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Version.requested() {
				opts.Version.print(cmd.OutOrStdout())
				return nil
			}
			// Logging first, so that what follows logs in the chosen
			// format; as upstream, a bad logging flag stops the command.
			if err := logsapi.ValidateAndApply(opts.Logs, featureGate); err != nil {
				return err
			}
			ctrl.SetLogger(klog.Background())
			return run(klog.NewContext(cmd.Context(), klog.Background()))
		},
	}
	var nfs cliflag.NamedFlagSets
	if text.Yield {
		nfs = opts.flagSets()
		opts.registerYielding(cmd, nfs)
	} else {
		nfs = opts.AddFlags(cmd.Flags())
	}
	for _, name := range extra.Order {
		cmd.Flags().AddFlagSet(extra.FlagSet(name))
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	// --help prints the flags by section, as upstream's does; subcommands
	// keep cobra's own help.
	defaultHelp := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		if c != cmd {
			defaultHelp(c, args)
			return
		}
		fmt.Fprintf(c.OutOrStdout(), "%s\n\nUsage:\n  %s\n", c.Long, c.UseLine())
		if c.HasAvailableSubCommands() {
			fmt.Fprintf(c.OutOrStdout(), "  %s [command]\n\nCommands:\n", c.CommandPath())
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					fmt.Fprintf(c.OutOrStdout(), "  %-12s %s\n", sub.Name(), sub.Short)
				}
			}
		}
		// 0 columns: no wrapping, so the text is the same in a pipe.
		cliflag.PrintSections(c.OutOrStdout(), helpSections(c, nfs), 0)
		cliflag.PrintSections(c.OutOrStdout(), extra, 0)
	})
	return cmd
}

// Main runs the command with the process's arguments until SIGINT or SIGTERM
// and returns the exit code: 0, or 1 after printing one line that says what
// went wrong.
func Main(reg *provider.Registry, subcommands ...*cobra.Command) int {
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.NewKlogr())
	defer klog.Flush()
	if err := NewCommand(reg, subcommands...).ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "outrigger: %v\n", err)
		return 1
	}
	return 0
}
