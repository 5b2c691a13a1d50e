// Package dev is `outrigger dev`, the embedded default: a real control plane
// (etcd and kube-apiserver built from source), a sim cloud with N instances,
// a kubelet simulator registering one node per instance, and Outrigger itself
// with leader election on, all in one process tree that stops on Ctrl-C.
package dev

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Options configure the environment.
type Options struct {
	// Nodes is how many instances (and so nodes) to start with, per
	// cluster.
	Nodes int
	// Clusters is how many clusters to run; more than one runs Outrigger
	// in tenant mode, one process serving them all (runClusters).
	Clusters int
	// StateDir receives the kubeconfig and the cloud-config.
	StateDir string
	// CloudAddress is where the sim cloud listens.
	CloudAddress string
	// NodeIPRange gives instances their IPv4 InternalIPs; it must be local
	// (loopback) so that their node ports can be served here.
	NodeIPRange string
	// LBPool is the local load balancers' VIP pool.
	LBPool string
	// PluginEndpoint, when set, makes Outrigger use the provider plugin
	// there (the grpc provider) instead of the dev provider.
	PluginEndpoint string
	// ConsoleAddress is where the web console is served over plain HTTP;
	// empty turns it off. Loopback, as it has no authentication.
	ConsoleAddress string
	// ConsoleActions lets the console change the sim cloud (stop, start
	// and terminate instances, inject faults).
	ConsoleActions bool
	// LogFile receives the log (klog's), errors also printed on stderr, so
	// that the terminal shows what the environment does and how far it is
	// in a few lines; empty is StateDir/outrigger.log, "-" the terminal.
	LogFile string
	// Outrigger holds Outrigger's own flags; kubeconfig, provider and
	// cloud-config are filled in by the environment.
	Outrigger *manager.Options
}

// NewCommand returns `outrigger dev`.
func NewCommand() *cobra.Command {
	opts := Options{Outrigger: manager.NewOptions()}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run Outrigger on its embedded default: a local control plane, a sim cloud and simulated nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Clusters < 1 {
				return fmt.Errorf("--clusters %d: at least 1", opts.Clusters)
			}
			return Run(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 3, "Instances, and so nodes, to start with (per cluster).")
	cmd.Flags().IntVar(&opts.Clusters, "clusters", 1, "Clusters to run, each its own etcd and kube-apiserver with its own nodes, on one sim cloud; more than one runs Outrigger in tenant mode, one process serving them all (docs/tenants.md).")
	cmd.Flags().StringVar(&opts.StateDir, "state-dir", ".outrigger", "Directory for the admin kubeconfig and the cloud-config.")
	cmd.Flags().StringVar(&opts.CloudAddress, "cloud-address", "127.0.0.1:8480", "Address the sim cloud listens on.")
	cmd.Flags().StringVar(&opts.NodeIPRange, "node-ip-range", "127.1.0.0/16", "IPv4 range of the simulated nodes' InternalIPs, on loopback: each node's Service node ports are served there.")
	cmd.Flags().StringVar(&opts.LBPool, "lb-pool", "127.0.100.0/24", "VIPs of LoadBalancer Services, on this machine.")
	cmd.Flags().StringVar(&opts.PluginEndpoint, "plugin-endpoint", "", "Run Outrigger with the provider plugin at this endpoint (unix:///path) instead of the built-in dev provider; the plugin's cloud must know the instances node-1, node-2, ...")
	cmd.Flags().StringVar(&opts.ConsoleAddress, "console-address", "127.0.0.1:8481", "Address of the web console (plain HTTP, no authentication: keep it on loopback); empty turns it off.")
	cmd.Flags().StringVar(&opts.LogFile, "log-file", "", "File for the log, errors also printed here (default: outrigger.log in --state-dir); - keeps all of it on the terminal.")
	cmd.Flags().BoolVar(&opts.ConsoleActions, "console-actions", false, "Let the console change the sim cloud: stop, start and terminate instances, throttle it or make it fail calls.")
	cmd.Flags().IntVar(&opts.Outrigger.Serving.BindPort, "secure-port", opts.Outrigger.Serving.BindPort, "Outrigger's HTTPS port for /healthz, /readyz and /metrics; 0 disables it.")
	// Pod networking is on by default in dev, dual-stack.
	opts.Outrigger.AllocateNodeCIDRs = true
	opts.Outrigger.ClusterCIDR = "198.18.0.0/16,fd00:10:244::/56"
	cmd.Flags().BoolVar(&opts.Outrigger.AllocateNodeCIDRs, "allocate-node-cidrs", opts.Outrigger.AllocateNodeCIDRs, "Give nodes pod CIDRs and cloud routes.")
	cmd.Flags().StringVar(&opts.Outrigger.ClusterCIDR, "cluster-cidr", opts.Outrigger.ClusterCIDR, "The cluster's pod CIDRs.")
	return cmd
}

// Run runs the environment until ctx ends, then stops everything it started.
func Run(ctx context.Context, opts Options, out io.Writer) error {
	log := klog.FromContext(ctx)
	if err := os.MkdirAll(opts.StateDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", opts.StateDir, err)
	}
	if opts.LogFile != "-" {
		path := opts.LogFile
		if path == "" {
			path = filepath.Join(opts.StateDir, "outrigger.log")
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
		}
		defer f.Close()
		// klog writes errors to stderr too when not all of it goes there
		// (its -stderrthreshold, ERROR).
		klog.LogToStderr(false)
		klog.SetOutput(f)
		defer func() { klog.Flush(); klog.LogToStderr(true) }()
		fmt.Fprintf(out, "Logging to %s (errors also here).\n", path)
	}
	// Bind the cloud's port first: a port in use should fail in a second,
	// not after the control plane started.
	cloud := simcloud.New("")
	nodeIPs, err := netip.ParsePrefix(opts.NodeIPRange)
	if err != nil {
		return fmt.Errorf("--node-ip-range: %w", err)
	}
	if err := cloud.SetInternalIPv4Range(nodeIPs); err != nil {
		return fmt.Errorf("--node-ip-range: %w", err)
	}
	if _, err := netip.ParsePrefix(opts.LBPool); err != nil {
		return fmt.Errorf("--lb-pool: %w", err)
	}
	cloudCtx, stopCloud := context.WithCancel(context.Background())
	defer stopCloud()
	cloudURL, err := cloud.Serve(cloudCtx, opts.CloudAddress)
	if err != nil {
		return fmt.Errorf("%w (another `outrigger dev` running? pick another --cloud-address)", err)
	}
	if opts.Clusters > 1 {
		return runClusters(ctx, opts, out, cloud, cloudURL)
	}
	for i := range opts.Nodes {
		if _, err := cloud.Create(simcloud.CreateRequest{Name: fmt.Sprintf("node-%d", i+1)}); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "Starting the control plane (etcd, kube-apiserver)...")
	cpStart := time.Now()
	cp, err := apiserver.Start(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Control plane ready in %s.\n", seconds(time.Since(cpStart)))
	defer func() {
		fmt.Fprintln(out, "Stopping the control plane...")
		if err := cp.Stop(); err != nil {
			log.Error(err, "Stopping the control plane")
		}
	}()
	kubeconfig, err := writeState(opts.StateDir, cp, cloudURL, opts.LBPool)
	if err != nil {
		return err
	}

	// The Gateway API's CRDs, so Gateways get the dev provider's load
	// balancers; without them (no Go module cache here) the rest runs.
	fmt.Fprint(out, "Installing the Gateway API's CRDs... ")
	gwStart := time.Now()
	if err := gatewayapi.Install(ctx, cp.Config); err != nil {
		fmt.Fprintln(out, "failed: Gateways are off.")
		log.Error(err, "Gateway API not installed; Gateways are off")
	} else {
		fmt.Fprintf(out, "done in %s.\n", seconds(time.Since(gwStart)))
	}

	client := kubernetes.NewForConfigOrDie(cp.Config)
	sim := &kubeletsim.Simulator{Cloud: cloud, Client: client}
	nodePorts := &kubeletsim.NodePorts{Cloud: cloud, Client: client}
	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	go sim.Run(simCtx)
	go nodePorts.Run(simCtx)

	o := opts.Outrigger
	o.Kubeconfig = kubeconfig
	o.CloudProvider = ProviderName
	o.CloudConfig = filepath.Join(opts.StateDir, "cloud.yaml")
	o.Serving.BindAddress = net.IPv4(127, 0, 0, 1)
	o.DisableMetricsAuthentication = true
	reg := provider.NewRegistry()
	reg.Register(ProviderName, NewProvider)
	if opts.PluginEndpoint != "" {
		grpcConfig := filepath.Join(opts.StateDir, "grpc.yaml")
		if err := os.WriteFile(grpcConfig, []byte("endpoint: "+opts.PluginEndpoint+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", grpcConfig, err)
		}
		reg.Register(plugin.ProviderName, plugin.NewProvider)
		o.CloudProvider, o.CloudConfig = plugin.ProviderName, grpcConfig
		fmt.Fprintf(out, "Using the provider plugin at %s.\n", opts.PluginEndpoint)
	}
	mgr, err := manager.New(ctx, o, reg)
	if err != nil {
		return err
	}
	gw, err := gwclient.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("building the Gateway API client: %w", err)
	}
	consoleURL, err := startConsole(ctx, opts, client, gw, cloud, opts.LBPool, nil)
	if err != nil {
		return err
	}
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	fmt.Fprintf(out, `
Outrigger is running on a local control plane with %d simulated nodes.

  export KUBECONFIG=%s
  alias kubectl=%s          # or your own kubectl
  kubectl get nodes -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type -w
  kubectl get nodes -o custom-columns=NAME:.metadata.name,POD-CIDRS:.spec.podCIDRs
  kubectl get events -A --field-selector involvedObject.kind=Node -w

The sim cloud is at %s. Watch Outrigger react:

  ./bin/outrigger sim list
  ./bin/outrigger sim routes              # one route per node pod CIDR
  ./bin/outrigger sim create node-%d      # a new node joins and is initialized
  ./bin/outrigger sim stop node-1         # node-1 goes NotReady and is tainted shutdown
  ./bin/outrigger sim start node-1        # ... and untainted
  ./bin/outrigger sim terminate node-2    # node-2 is deleted

Load balancers are real, on this machine (VIPs from %s); each simulated node
answers its Service node ports itself:

  kubectl create service loadbalancer web --tcp=80:8080
  kubectl get service web -w              # EXTERNAL-IP is a local VIP
  curl http://$(kubectl get service web -o jsonpath='{.status.loadBalancer.ingress[0].ip}')/
`, opts.Nodes, absPath(kubeconfig), kubectl, cloudURL, opts.Nodes+1, opts.LBPool)
	if o.Serving.BindPort > 0 {
		fmt.Fprintf(out, "\nOutrigger's metrics: curl -k https://127.0.0.1:%d/metrics | grep outrigger_cloud\n", o.Serving.BindPort)
	}
	if consoleURL != "" {
		fmt.Fprintf(out, "\nThe web console (load balancers, pools, nodes, cloud calls): %s\n", consoleURL)
	}
	fmt.Fprintln(out, "\nCtrl-C stops everything.")
	fmt.Fprintln(out)
	go nodeProgress{Client: client, Out: out, Want: opts.Nodes, Poll: 250 * time.Millisecond, Every: 5 * time.Second}.Run(simCtx)
	err = mgr.Start(ctx)
	// Give the simulator a moment to notice before the API server goes.
	stopSim()
	time.Sleep(100 * time.Millisecond)
	return err
}

// startConsole serves the web console on opts.ConsoleAddress until ctx
// ends, and returns its URL ("" when it is off). It samples the call
// layer's metrics from this process's registry, where the manager
// records them. pool is the cluster's part of the VIP pool; tenants, with
// --clusters, are tenant mode's tenants for the Tenants view.
func startConsole(ctx context.Context, opts Options, client kubernetes.Interface, gw gwclient.Interface, cloud *simcloud.Cloud,
	pool string, tenants func() []console.Tenant) (string, error) {
	if opts.ConsoleAddress == "" {
		return "", nil
	}
	ranges := []console.Range{{Name: "local-lb-pool", Prefix: netip.MustParsePrefix(pool).Masked()}}
	if opts.Outrigger.AllocateNodeCIDRs {
		pods, err := console.ClusterRanges(opts.Outrigger.ClusterCIDR, opts.Outrigger.NodeCIDRMaskSizeIPv4, opts.Outrigger.NodeCIDRMaskSizeIPv6)
		if err != nil {
			return "", fmt.Errorf("--cluster-cidr: %w", err)
		}
		ranges = append(ranges, pods...)
	}
	co := console.Options{Client: client, Gateway: gw, Gatherer: ctrlmetrics.Registry, Ranges: ranges,
		Class: opts.Outrigger.LoadBalancerClass, Tenants: tenants, Log: klog.FromContext(ctx).WithName("console")}
	if opts.ConsoleActions {
		co.Actions = SimActions{Cloud: cloud}
	}
	l, err := console.Listen(ctx, opts.ConsoleAddress)
	if err != nil {
		return "", fmt.Errorf("%w (another `outrigger dev` running? pick another --console-address)", err)
	}
	go func() {
		if err := console.Serve(ctx, console.New(co), l); err != nil {
			klog.FromContext(ctx).Error(err, "Serving the console")
		}
	}()
	return "http://" + l.Addr().String() + "/", nil
}

func writeState(dir string, cp *apiserver.ControlPlane, cloudURL, lbPool string) (string, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	// sim.yaml is the sim provider's own cloud-config (for `outrigger sim`
	// and for running Outrigger by hand with --cloud-provider=sim);
	// cloud.yaml is the dev provider's, adding the local load balancers.
	files := map[string]string{
		"sim.yaml":   "endpoint: " + cloudURL + "\n",
		"cloud.yaml": "sim:\n  endpoint: " + cloudURL + "\nlocal:\n  pool: " + lbPool + "\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return "", fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return kubeconfig, nil
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
