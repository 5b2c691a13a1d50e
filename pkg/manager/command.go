package manager

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/pkg/providers"
)

// NewCommand returns the outrigger command: run with flags, it is the cloud
// controller manager; extra subcommands (dev, sim) are added by the caller.
func NewCommand(reg *providers.Registry, subcommands ...*cobra.Command) *cobra.Command {
	opts := NewOptions()
	cmd := &cobra.Command{
		Use:   "outrigger",
		Short: "Outrigger is a Kubernetes cloud-controller-manager",
		Long: "Outrigger runs the cloud controllers of a Kubernetes cluster (node initialization and node lifecycle)\n" +
			"for the provider named by --cloud-provider. Registered providers: " + fmt.Sprint(reg.Names()) + ".",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Run(cmd.Context(), opts, reg)
		},
	}
	opts.AddFlags(cmd.Flags())
	// Of klog's flags, only the two Kubernetes components document.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for _, name := range []string{"v", "vmodule"} {
		cmd.PersistentFlags().AddGoFlag(klogFlags.Lookup(name))
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.AddCommand(subcommands...)
	return cmd
}

// Main runs the command with the process's arguments until SIGINT or SIGTERM
// and returns the exit code: 0, or 1 after printing one line that says what
// went wrong.
func Main(reg *providers.Registry, subcommands ...*cobra.Command) int {
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.NewKlogr())
	if err := NewCommand(reg, subcommands...).ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "outrigger: %v\n", err)
		return 1
	}
	return 0
}
