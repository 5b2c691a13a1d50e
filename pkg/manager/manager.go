package manager

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// NewCommand returns the outrigger command: run with flags, it is the cloud
// controller manager; extra subcommands (dev, sim) are added by the caller.
func NewCommand(reg *provider.Registry, subcommands ...*cobra.Command) *cobra.Command {
	opts := manager.NewOptions()
	cmd := manager.NewCustomCommand(opts, manager.CommandText{
		Use:   "outrigger",
		Short: "Outrigger is a Kubernetes cloud-controller-manager",
		Long: "Outrigger runs the cloud controllers of a Kubernetes cluster (node initialization, node lifecycle,\n" +
			"load balancers, routes, node IPAM) for the provider named by --cloud-provider. It accepts every flag of\n" +
			"the upstream cloud-controller-manager. Registered providers: " + fmt.Sprint(reg.Names()) + ".",
	}, cliflag.NamedFlagSets{}, func(ctx context.Context) error {
		return manager.Run(ctx, opts, reg)
	})
	cmd.AddCommand(subcommands...)
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
