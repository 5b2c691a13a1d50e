package manager

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/outrigger-ccm/outrigger/pkg/controllers/node"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/route"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/service"
)

// shippedControllers are the controllers this build runs, in start order.
var shippedControllers = []string{node.Name, nodelifecycle.Name, service.Name, nodeipam.Name, route.Name}

// Options are the command's flags. Names and meanings follow the upstream
// cloud-controller-manager where upstream has the flag; defaults differ where
// upstream's are sized for small clusters (noted on the flag).
type Options struct {
	CloudProvider string
	CloudConfig   string
	Kubeconfig    string
	Master        string
	Controllers   []string
	ClusterName   string

	LeaderElect                  bool
	LeaderElectLeaseDuration     time.Duration
	LeaderElectRenewDeadline     time.Duration
	LeaderElectRetryPeriod       time.Duration
	LeaderElectResourceName      string
	LeaderElectResourceNamespace string
	EnableLeaderMigration        bool
	LeaderMigrationConfig        string
	ConcurrentNodeSyncs          int
	ConcurrentServiceSyncs       int
	LoadBalancerClass            string
	NodeMonitorPeriod            time.Duration
	NodeStatusUpdateFrequency    time.Duration
	KubeAPIQPS                   float32
	KubeAPIBurst                 int
	SecurePort                   int
	BindAddress                  string
	CloudQPS                     float64
	CloudBurst                   int
	CloudCallTimeout             time.Duration
	DisableMetricsAuthentication bool

	AllocateNodeCIDRs         bool
	ClusterCIDR               string
	NodeCIDRMaskSizeIPv4      int
	NodeCIDRMaskSizeIPv6      int
	CIDRAllocatorType         string
	ConfigureCloudRoutes      bool
	RouteReconciliationPeriod time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Controllers:                  []string{"*"},
		ClusterName:                  "kubernetes",
		LeaderElect:                  true,
		LeaderElectLeaseDuration:     15 * time.Second,
		LeaderElectRenewDeadline:     10 * time.Second,
		LeaderElectRetryPeriod:       2 * time.Second,
		LeaderElectResourceName:      "cloud-controller-manager",
		LeaderElectResourceNamespace: "kube-system",
		ConcurrentNodeSyncs:          256,
		ConcurrentServiceSyncs:       64,
		NodeMonitorPeriod:            5 * time.Second,
		NodeStatusUpdateFrequency:    5 * time.Minute,
		KubeAPIQPS:                   500,
		KubeAPIBurst:                 1000,
		SecurePort:                   10258,
		BindAddress:                  "0.0.0.0",
		CloudQPS:                     50,
		CloudBurst:                   50,
		CloudCallTimeout:             30 * time.Second,
		NodeCIDRMaskSizeIPv4:         24,
		NodeCIDRMaskSizeIPv6:         64,
		CIDRAllocatorType:            nodeipam.RangeAllocator,
		ConfigureCloudRoutes:         true,
		RouteReconciliationPeriod:    10 * time.Second,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CloudProvider, "cloud-provider", o.CloudProvider, "The provider to run (required); the error for an unknown name lists this binary's providers.")
	fs.StringVar(&o.CloudConfig, "cloud-config", o.CloudConfig, "Path to the provider's configuration file.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster configuration.")
	fs.StringVar(&o.Master, "master", o.Master, "The API server's address, overriding the kubeconfig's.")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "Controllers to run: '*' for all, 'name' to enable, '-name' to disable. Names: "+strings.Join(shippedControllers, ", ")+".")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "The cluster's name, which providers tag cloud resources with (route names, load balancer tags).")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease before running controllers; run several replicas for availability.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long a non-leader waits after the last renewal before taking over.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the leader keeps trying to renew before giving up leadership.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "How long candidates wait between attempts to acquire or renew.")
	fs.StringVar(&o.LeaderElectResourceName, "leader-elect-resource-name", o.LeaderElectResourceName, "Name of the Lease used for leader election (upstream's by default, so the two never lead at once).")
	fs.StringVar(&o.LeaderElectResourceNamespace, "leader-elect-resource-namespace", o.LeaderElectResourceNamespace, "Namespace of the leader election Lease.")
	fs.BoolVar(&o.EnableLeaderMigration, "enable-leader-migration", o.EnableLeaderMigration, "Take part in leader migration (KEP-2436): run the controllers a migration config assigns to cloud-controller-manager (or '*') only while holding the migration lease, and not those it assigns to another component.")
	fs.StringVar(&o.LeaderMigrationConfig, "leader-migration-config", o.LeaderMigrationConfig, "Path to a LeaderMigrationConfiguration (upstream's format). Default: routes, services and node lifecycle move, under the lease cloud-provider-extraction-migration.")
	fs.IntVar(&o.ConcurrentNodeSyncs, "concurrent-node-syncs", o.ConcurrentNodeSyncs, "Nodes initialized at once (upstream default: 1). Cloud calls stay within --cloud-qps whatever this is.")
	fs.IntVar(&o.ConcurrentServiceSyncs, "concurrent-service-syncs", o.ConcurrentServiceSyncs, "Load balancer Services synced at once (upstream default: 1). Cloud calls stay within --cloud-qps whatever this is.")
	fs.StringVar(&o.LoadBalancerClass, "load-balancer-class", o.LoadBalancerClass, "Own the LoadBalancer Services of this spec.loadBalancerClass instead of those without a class, so several CCMs can share a cluster.")
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "How often NotReady nodes are checked against the cloud (deleted when gone, tainted when shut down).")
	fs.DurationVar(&o.NodeStatusUpdateFrequency, "node-status-update-frequency", o.NodeStatusUpdateFrequency, "How often every node's addresses are refreshed from the cloud.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the API server (upstream default: 20; the API server's priority and fairness still applies).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server (upstream default: 30).")
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "HTTPS port for /healthz, /readyz and /metrics; 0 disables serving.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address to serve --secure-port on.")
	fs.Float64Var(&o.CloudQPS, "cloud-qps", o.CloudQPS, "Calls per second to the cloud provider, across all controllers; 0 means unlimited.")
	fs.IntVar(&o.CloudBurst, "cloud-burst", o.CloudBurst, "Burst of calls to the cloud provider above --cloud-qps.")
	fs.DurationVar(&o.CloudCallTimeout, "cloud-call-timeout", o.CloudCallTimeout, "Deadline of one cloud provider call; a call past it fails and is retried with backoff.")
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "Give every node pod CIDRs (node-ipam-controller) and, with --configure-cloud-routes, a cloud route for each (node-route-controller).")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "The cluster's pod CIDR: one, or an IPv4 and an IPv6 one separated by a comma (dual-stack).")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", o.NodeCIDRMaskSizeIPv4, "Prefix length of each node's IPv4 pod CIDR.")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", o.NodeCIDRMaskSizeIPv6, "Prefix length of each node's IPv6 pod CIDR.")
	fs.StringVar(&o.CIDRAllocatorType, "cidr-allocator-type", o.CIDRAllocatorType, "RangeAllocator (CIDRs cut from --cluster-cidr) or CloudAllocator (the provider assigns them).")
	fs.BoolVar(&o.ConfigureCloudRoutes, "configure-cloud-routes", o.ConfigureCloudRoutes, "Create a cloud route for every node's pod CIDRs (needs --allocate-node-cidrs and a provider with routes).")
	fs.DurationVar(&o.RouteReconciliationPeriod, "route-reconciliation-period", o.RouteReconciliationPeriod, "How often all routes are compared with the nodes, besides on node changes.")
	fs.BoolVar(&o.DisableMetricsAuthentication, "disable-metrics-authentication", o.DisableMetricsAuthentication, "Serve /metrics without authenticating and authorizing the caller (for local development only).")
}

// Validate checks the options and returns one error that says what to fix.
func (o *Options) Validate() error {
	var errs []error
	if o.CloudProvider == "" {
		errs = append(errs, errors.New("--cloud-provider is required"))
	}
	if _, err := o.EnabledControllers(); err != nil {
		errs = append(errs, err)
	}
	if o.LeaderElect {
		if o.LeaderElectLeaseDuration <= o.LeaderElectRenewDeadline {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%s) must be greater than --leader-elect-renew-deadline (%s)", o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline))
		}
		if o.LeaderElectRetryPeriod <= 0 || o.LeaderElectRenewDeadline <= o.LeaderElectRetryPeriod {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%s) must be greater than --leader-elect-retry-period (%s), which must be positive", o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod))
		}
		if o.LeaderElectResourceName == "" || o.LeaderElectResourceNamespace == "" {
			errs = append(errs, errors.New("--leader-elect-resource-name and --leader-elect-resource-namespace must not be empty"))
		}
	}
	if o.LeaderMigrationConfig != "" && !o.EnableLeaderMigration {
		errs = append(errs, errors.New("--leader-migration-config needs --enable-leader-migration"))
	}
	if o.EnableLeaderMigration && !o.LeaderElect {
		errs = append(errs, errors.New("--enable-leader-migration needs --leader-elect"))
	}
	positive := []struct {
		name string
		ok   bool
	}{
		{"--concurrent-node-syncs", o.ConcurrentNodeSyncs > 0},
		{"--concurrent-service-syncs", o.ConcurrentServiceSyncs > 0},
		{"--node-monitor-period", o.NodeMonitorPeriod > 0},
		{"--node-status-update-frequency", o.NodeStatusUpdateFrequency > 0},
		{"--kube-api-qps", o.KubeAPIQPS > 0},
		{"--kube-api-burst", o.KubeAPIBurst > 0},
		{"--cloud-call-timeout", o.CloudCallTimeout > 0},
	}
	for _, p := range positive {
		if !p.ok {
			errs = append(errs, fmt.Errorf("%s must be positive", p.name))
		}
	}
	if o.AllocateNodeCIDRs {
		if o.ClusterCIDR == "" {
			errs = append(errs, errors.New("--allocate-node-cidrs needs --cluster-cidr"))
		} else if cidrs, err := nodeipam.ParseClusterCIDRs(o.ClusterCIDR); err != nil {
			errs = append(errs, err)
		} else if err := nodeipam.ValidateRanges(cidrs, o.NodeCIDRMaskSizeIPv4, o.NodeCIDRMaskSizeIPv6); o.CIDRAllocatorType == nodeipam.RangeAllocator && err != nil {
			errs = append(errs, err)
		}
		if o.CIDRAllocatorType != nodeipam.RangeAllocator && o.CIDRAllocatorType != nodeipam.CloudAllocator {
			errs = append(errs, fmt.Errorf("--cidr-allocator-type %q: use %s or %s", o.CIDRAllocatorType, nodeipam.RangeAllocator, nodeipam.CloudAllocator))
		}
		if o.NodeCIDRMaskSizeIPv4 < 1 || o.NodeCIDRMaskSizeIPv4 > 32 || o.NodeCIDRMaskSizeIPv6 < 1 || o.NodeCIDRMaskSizeIPv6 > 128 {
			errs = append(errs, fmt.Errorf("--node-cidr-mask-size-ipv4 (%d) must be 1-32 and --node-cidr-mask-size-ipv6 (%d) 1-128", o.NodeCIDRMaskSizeIPv4, o.NodeCIDRMaskSizeIPv6))
		}
	}
	if o.LoadBalancerClass != "" {
		for _, msg := range validation.IsQualifiedName(o.LoadBalancerClass) {
			errs = append(errs, fmt.Errorf("--load-balancer-class %q: %s", o.LoadBalancerClass, msg))
		}
	}
	if o.RouteReconciliationPeriod <= 0 {
		errs = append(errs, errors.New("--route-reconciliation-period must be positive"))
	}
	if o.CloudQPS < 0 || o.CloudBurst < 0 {
		errs = append(errs, errors.New("--cloud-qps and --cloud-burst must not be negative"))
	}
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d is not a port (0-65535)", o.SecurePort))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address", o.BindAddress))
	}
	return oneLine(errs)
}

// oneLine joins errors into one error of one line, however many problems:
// the command prints it as is.
func oneLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// EnabledControllers resolves --controllers into the controllers to run.
func (o *Options) EnabledControllers() ([]string, error) {
	all := false
	enabled := map[string]bool{}
	disabled := map[string]bool{}
	for _, c := range o.Controllers {
		c = strings.TrimSpace(c)
		name, off := strings.CutPrefix(c, "-")
		switch {
		case c == "*":
			all = true
			continue
		case slices.Contains(shippedControllers, name):
		default:
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", c, strings.Join(shippedControllers, ", "))
		}
		if off {
			disabled[name] = true
		} else {
			enabled[name] = true
		}
	}
	var out []string
	for _, name := range shippedControllers {
		if !disabled[name] && (all || enabled[name]) {
			out = append(out, name)
		}
	}
	return out, nil
}
