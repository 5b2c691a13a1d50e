package manager

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	// --logging-format=json, as upstream's binaries register it.
	_ "k8s.io/component-base/logs/json/register"
)

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
