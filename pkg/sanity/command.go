package sanity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// ErrFailed is returned by the command when a case failed.
var ErrFailed = errors.New("conformance cases failed")

// NewCommand returns `outrigger conformance`.
func NewCommand() *cobra.Command {
	var (
		cfg      plugin.Config
		ca       string
		nodes    []string
		junit    string
		timeout  time.Duration
		connect  time.Duration
		cidr     string
		certFile string
		keyFile  string
	)
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Check a provider plugin against the contract Outrigger's controllers rely on",
		Long: "Connects to a plugin, asks its capabilities, and runs the cases for each: instances, batch lookups, load balancers, routes.\n" +
			"Exits non-zero if any case fails. --node names an instance that exists in the plugin's cloud (NAME or NAME=PROVIDERID), for the cases that need one.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ca != "" {
				cfg.TLS = &plugin.TLSConfig{CAFile: ca, CertFile: certFile, KeyFile: keyFile}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), connect)
			p, err := plugin.Dial(ctx, cfg)
			cancel()
			if err != nil {
				return err
			}
			opts := Options{CallTimeout: timeout, RouteCIDR: cidr}
			for _, n := range nodes {
				name, providerID, _ := strings.Cut(n, "=")
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
				node.Spec.ProviderID = providerID
				opts.Nodes = append(opts.Nodes, node)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Plugin %q at %s\n\n", p.ProviderName(), cfg.Endpoint)
			results := Run(cmd.Context(), p, opts)
			if err := WriteText(cmd.OutOrStdout(), results); err != nil {
				return err
			}
			if junit != "" {
				f, err := os.Create(junit)
				if err != nil {
					return fmt.Errorf("--junit: %w", err)
				}
				if err := WriteJUnit(f, results); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			if Failed(results) > 0 {
				return ErrFailed
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cfg.Endpoint, "endpoint", plugin.DefaultEndpoint, "The plugin: unix:///path, or host:port with --tls-ca.")
	cmd.Flags().StringVar(&ca, "tls-ca", "", "CA (PEM) that signed the plugin's certificate, for a TCP endpoint.")
	cmd.Flags().StringVar(&certFile, "tls-cert", "", "Client certificate (PEM) for mutual TLS.")
	cmd.Flags().StringVar(&keyFile, "tls-key", "", "Client key (PEM) for mutual TLS.")
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "An existing instance, NAME or NAME=PROVIDERID (repeatable).")
	cmd.Flags().StringVar(&junit, "junit", "", "Also write the results as JUnit XML to this file.")
	cmd.Flags().DurationVar(&timeout, "call-timeout", 10*time.Second, "Deadline of every call.")
	cmd.Flags().DurationVar(&connect, "connect-timeout", 10*time.Second, "How long to wait for the plugin to answer at all.")
	cmd.Flags().StringVar(&cidr, "route-cidr", "", "Destination of the test route (default: a random /32 in 100.127.0.0/16).")
	return cmd
}
