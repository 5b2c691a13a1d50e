// Package simcli is the `outrigger sim` command: serve a sim cloud as its own
// process, and act on a running one (list, create, stop, start and terminate
// instances; read and change its fault settings; read its call counters) so
// a user can watch Outrigger react.
package simcli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/awsemu"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// DefaultEndpoint is where `outrigger dev` serves its sim cloud.
const DefaultEndpoint = "http://127.0.0.1:8480"

// NewCommand returns `outrigger sim`.
func NewCommand() *cobra.Command {
	var endpoint, cloudConfig string
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run or drive the simulated cloud",
		Long: "Serve a simulated cloud, or act on a running one (the one `outrigger dev` starts by default).\n" +
			"The endpoint comes from --endpoint, else from --cloud-config, else " + DefaultEndpoint + ".",
	}
	cmd.PersistentFlags().StringVar(&endpoint, "endpoint", "", "The sim cloud's URL.")
	cmd.PersistentFlags().StringVar(&cloudConfig, "cloud-config", ".outrigger/sim.yaml", "A sim provider cloud-config to read the endpoint from, if --endpoint is not given.")
	client := func() (*simcloud.Client, error) {
		ep := endpoint
		if ep == "" {
			if f, err := os.Open(cloudConfig); err == nil {
				cfg, _, _, perr := sim.ParseConfig(f)
				f.Close()
				if perr != nil {
					return nil, fmt.Errorf("reading the endpoint from %s: %w", cloudConfig, perr)
				}
				ep = cfg.Endpoint
			} else {
				ep = DefaultEndpoint
			}
		}
		c := simcloud.NewClient(ep, 10*time.Second, 2)
		c.Admin = true
		return c, nil
	}

	cmd.AddCommand(serveCommand())
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List instances",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tNAME\tSTATE\tTYPE\tZONE\tADDRESSES")
			for _, in := range list {
				var addrs []string
				for _, a := range in.Addresses {
					if a.Type == "InternalIP" || a.Type == "ExternalIP" {
						addrs = append(addrs, a.Address)
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\n", in.ID, in.Name, in.State, in.Type, in.Zone, addrs)
			}
			return w.Flush()
		},
	})
	var createType, createZone string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a running instance (`outrigger dev` registers a node for it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			in, err := c.Create(cmd.Context(), simcloud.CreateRequest{Name: args[0], Type: createType, Zone: createZone})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "instance %s (%s) created\n", in.Name, in.ID)
			return nil
		},
	}
	create.Flags().StringVar(&createType, "type", "", "Instance type (default sim.small).")
	create.Flags().StringVar(&createZone, "zone", "", "Zone (default: round-robin).")
	cmd.AddCommand(create)
	for _, action := range []struct{ verb, short string }{
		{"stop", "Stop an instance: its node goes NotReady and gets the shutdown taint"},
		{"start", "Start a stopped instance: its node becomes Ready and loses the shutdown taint"},
		{"terminate", "Terminate an instance: its node goes NotReady and is deleted"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.verb + " NAME|ID",
			Short: action.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := client()
				if err != nil {
					return err
				}
				in, err := c.Action(cmd.Context(), args[0], action.verb)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "instance %s (%s) is %s\n", in.Name, in.ID, in.State)
				return nil
			},
		})
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "routes",
		Short: "List the cloud's route table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			routes, err := c.Routes(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DESTINATION\tTARGET\tBLACKHOLE\tNAME")
			for _, r := range routes {
				fmt.Fprintf(w, "%s\t%s\t%t\t%s\n", r.Destination, r.Target, r.Blackhole, r.Name)
			}
			return w.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "loadbalancers",
		Short: "List the cloud's load balancers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			lbs, err := c.LoadBalancers(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME	VIP	SERVICE	LISTENERS	BACKENDS")
			for _, lb := range lbs {
				var listeners []string
				for _, l := range lb.Listeners {
					listeners = append(listeners, fmt.Sprintf("%s/%d->%d", l.Protocol, l.Port, l.NodePort))
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", lb.Name, lb.VIP, lb.Tags["service"], strings.Join(listeners, ","), len(lb.Backends))
			}
			return w.Flush()
		},
	})
	cmd.AddCommand(settingsCommand(client))
	cmd.AddCommand(&cobra.Command{
		Use:   "calls",
		Short: "Show the calls the cloud has answered, by operation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			calls, err := c.Calls(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(cmd, calls)
		},
	})
	return cmd
}

func settingsCommand(client func() (*simcloud.Client, error)) *cobra.Command {
	var s simcloud.Settings
	var latency time.Duration
	cmd := &cobra.Command{
		Use:   "settings",
		Short: "Show the cloud's fault settings, or change them with flags",
		Example: "  outrigger sim settings --latency 200ms --rate-limit 100\n" +
			"  outrigger sim settings --error-rate 0.3\n  outrigger sim settings --reset",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur, err := c.Settings(ctx)
			if err != nil {
				return err
			}
			fs := cmd.Flags()
			if reset, _ := fs.GetBool("reset"); reset {
				cur = simcloud.Settings{}
			}
			if fs.Changed("latency") {
				cur.Latency = simcloud.Duration{Duration: latency}
			}
			if fs.Changed("rate-limit") {
				cur.RateLimit = s.RateLimit
			}
			if fs.Changed("rate-burst") {
				cur.RateBurst = s.RateBurst
			}
			if fs.Changed("error-rate") {
				cur.ErrorRate = s.ErrorRate
			}
			if fs.Changed("hang") {
				cur.Hang = s.Hang
			}
			if fs.Changed("max-instances") {
				cur.MaxInstances = s.MaxInstances
			}
			if fs.Changed("max-routes") {
				cur.MaxRoutes = s.MaxRoutes
			}
			if fs.NFlag() > 0 {
				if err := c.SetSettings(ctx, cur); err != nil {
					return err
				}
			}
			return printJSON(cmd, cur)
		},
	}
	cmd.Flags().DurationVar(&latency, "latency", 0, "Latency added to every call.")
	cmd.Flags().Float64Var(&s.RateLimit, "rate-limit", 0, "Calls per second before the cloud answers 429 (0: unlimited).")
	cmd.Flags().IntVar(&s.RateBurst, "rate-burst", 0, "Burst above --rate-limit.")
	cmd.Flags().Float64Var(&s.ErrorRate, "error-rate", 0, "Fraction of calls answered with 500.")
	cmd.Flags().BoolVar(&s.Hang, "hang", false, "Make every call hang until the client gives up.")
	cmd.Flags().IntVar(&s.MaxInstances, "max-instances", 0, "Instance quota (0: unlimited).")
	cmd.Flags().IntVar(&s.MaxRoutes, "max-routes", 0, "Route table size (0: unlimited).")
	cmd.Flags().Bool("reset", false, "Turn every fault off first.")
	return cmd
}

func serveCommand() *cobra.Command {
	var listen, region string
	var instances int
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a sim cloud until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cloud := simcloud.New(region)
			for i := range instances {
				if _, err := cloud.Create(simcloud.CreateRequest{Name: fmt.Sprintf("node-%d", i+1)}); err != nil {
					return err
				}
			}
			// With the AWS APIs over the cloud, so that AWS's own provider
			// can be pointed at it as well as the sim provider.
			url, err := awsemu.New(cloud).Serve(cmd.Context(), listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sim cloud serving on %s with %d instances; cloud-config: endpoint: %s\n", url, instances, url)
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8480", "Address to listen on.")
	cmd.Flags().StringVar(&region, "region", "sim-region-1", "The cloud's region.")
	cmd.Flags().IntVar(&instances, "instances", 0, "Instances to create at start, named node-1, node-2, ...")
	return cmd
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
