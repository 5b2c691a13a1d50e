package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/internal/providersfile"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// ErrFailed is returned by the command when a case failed.
var ErrFailed = errors.New("conformance cases failed")

// NewCommand returns `outrigger conformance`. reg holds the providers
// linked into this binary, which --cloud-provider and --cloud-providers-file
// check instead of a plugin.
func NewCommand(reg *provider.Registry) *cobra.Command {
	var (
		cfg      plugin.Config
		name     string
		config   string
		file     string
		ca       string
		nodes    []string
		junit    string
		timeout  time.Duration
		connect  time.Duration
		cidr     string
		certFile string
		keyFile  string

		unknownID   string
		annotations string
		kubeconfig  string
		require     []string
		caps        []string
	)
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Check a provider plugin against the contract Outrigger's controllers rely on",
		Long: "Connects to a plugin, asks its capabilities, and runs the cases for each: instances, batch lookups, load balancers, routes.\n" +
			"With --cloud-provider (and --cloud-config) it checks a provider linked into this binary instead, and with --cloud-providers-file each provider listed there in turn.\n" +
			"Exits non-zero if any case fails. --node names an instance that exists in the provider's cloud (NAME or NAME=PROVIDERID), for the cases that need one.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := Options{CallTimeout: timeout, RouteCIDR: cidr, UnknownProviderID: unknownID, Require: require, Capabilities: caps}
			if annotations != "" {
				data, err := os.ReadFile(annotations)
				if err != nil {
					return fmt.Errorf("--service-annotations: %w", err)
				}
				if err := yaml.UnmarshalStrict(data, &opts.ServiceAnnotations); err != nil {
					return fmt.Errorf("--service-annotations %s: want a map of annotation to value: %w", annotations, err)
				}
			}
			for _, n := range nodes {
				name, providerID, _ := strings.Cut(n, "=")
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
				node.Spec.ProviderID = providerID
				opts.Nodes = append(opts.Nodes, node)
			}
			targets, err := providersToCheck(cmd, reg, name, config, file)
			if err != nil {
				return err
			}
			if len(targets) == 0 {
				if ca != "" {
					cfg.TLS = &plugin.TLSConfig{CAFile: ca, CertFile: certFile, KeyFile: keyFile}
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), connect)
				p, err := plugin.Dial(ctx, cfg)
				cancel()
				if err != nil {
					return err
				}
				targets = []target{{title: fmt.Sprintf("Plugin %q at %s", p.ProviderName(), cfg.Endpoint), provider: p}}
			} else {
				// A linked provider is initialized as the CCM would; a
				// plugin initializes itself on the first call for work.
				opts.ClientBuilder = plugin.ClientBuilderFor(kubeconfig)
			}
			var results []Result
			for _, tg := range targets {
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n\n", tg.title)
				rs := Run(cmd.Context(), tg.provider, opts)
				if err := WriteText(cmd.OutOrStdout(), rs); err != nil {
					return err
				}
				if len(targets) > 1 {
					// One JUnit suite per provider and capability.
					for i := range rs {
						rs[i].Capability = tg.name + "/" + rs[i].Capability
					}
					fmt.Fprintln(cmd.OutOrStdout())
				}
				results = append(results, rs...)
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
	cmd.Flags().StringVar(&name, "cloud-provider", "", "Check this provider linked into the binary instead of a plugin.")
	cmd.Flags().StringVar(&config, "cloud-config", "", "The --cloud-provider's configuration file.")
	cmd.Flags().StringVar(&file, "cloud-providers-file", "", "Check each provider of this file (Outrigger's --cloud-providers-file) in turn.")
	cmd.Flags().StringVar(&ca, "tls-ca", "", "CA (PEM) that signed the plugin's certificate, for a TCP endpoint.")
	cmd.Flags().StringVar(&certFile, "tls-cert", "", "Client certificate (PEM) for mutual TLS.")
	cmd.Flags().StringVar(&keyFile, "tls-key", "", "Client key (PEM) for mutual TLS.")
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "An existing instance, NAME or NAME=PROVIDERID (repeatable).")
	cmd.Flags().StringVar(&junit, "junit", "", "Also write the results as JUnit XML to this file.")
	cmd.Flags().DurationVar(&timeout, "call-timeout", 10*time.Second, "Deadline of every call.")
	cmd.Flags().DurationVar(&connect, "connect-timeout", 10*time.Second, "How long to wait for the plugin to answer at all.")
	cmd.Flags().StringVar(&cidr, "route-cidr", "", "Destination of the test route (default: a random /32 in 198.18.192.0/19).")
	cmd.Flags().StringVar(&unknownID, "unknown-provider-id", "", "The providerID of an instance that does not exist, in the provider's own form (default: <name>://outrigger-conformance-missing-<random>).")
	cmd.Flags().StringVar(&annotations, "service-annotations", "", "A YAML file of annotations for the test Service (a map of name to value).")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "For a linked provider: the kubeconfig of the client builder its Initialize gets (default: the pod's ServiceAccount, else none).")
	cmd.Flags().StringArrayVar(&require, "require", nil, "A case that must run (a capability, or part of a case's name): fails when skipped (repeatable).")
	cmd.Flags().StringArrayVar(&caps, "capability", nil, "Run only this capability's cases: Instances, LoadBalancer, Routes (repeatable; Identity always runs).")
	return cmd
}

// target is one provider to check.
type target struct {
	name, title string
	provider    cloudprovider.Interface
}

// providersToCheck builds the linked providers the flags name; none means
// the plugin at --endpoint.
func providersToCheck(cmd *cobra.Command, reg *provider.Registry, name, config, file string) ([]target, error) {
	build := func(name, config string) (cloudprovider.Interface, error) {
		var r io.Reader
		if config != "" {
			data, err := os.ReadFile(config)
			if err != nil {
				return nil, fmt.Errorf("provider %q: reading its cloud-config: %w", name, err)
			}
			r = bytes.NewReader(data)
		}
		return reg.New(name, r)
	}
	switch {
	case name != "" && file != "":
		return nil, errors.New("--cloud-provider and --cloud-providers-file do not go together")
	case name != "":
		p, err := build(name, config)
		if err != nil {
			return nil, err
		}
		return []target{{name: name, title: fmt.Sprintf("Provider %q", name), provider: p}}, nil
	case file != "":
		f, err := providersfile.Read(file)
		if err != nil {
			return nil, err
		}
		var out []target
		for _, e := range f.Providers {
			p, err := build(e.Name, e.CloudConfig)
			if err != nil {
				return nil, err
			}
			out = append(out, target{name: e.Name, title: fmt.Sprintf("Provider %q (%s)", e.Name, file), provider: p})
		}
		return out, nil
	case cmd.Flags().Changed("cloud-config"):
		return nil, errors.New("--cloud-config needs --cloud-provider")
	}
	return nil, nil
}
