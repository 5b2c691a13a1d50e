package manager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// Validate checks the options and returns one error that says what to fix.
func (o *Options) Validate() error {
	var errs []error
	switch {
	case o.CloudProvidersFile != "":
		for _, f := range []struct {
			flag string
			set  bool
		}{{"cloud-provider", o.CloudProvider != ""}, {"cloud-config", o.CloudConfig != ""},
			{"cloud-provider-platforms", len(o.CloudProviderPlatforms) > 0}, {"load-balancer-class", o.LoadBalancerClass != ""}} {
			if f.set {
				errs = append(errs, fmt.Errorf("--%s and --cloud-providers-file do not go together: give it in the file", f.flag))
			}
		}
		if o.AllocateNodeCIDRs && o.CIDRAllocatorType == nodeipam.CloudAllocator {
			errs = append(errs, fmt.Errorf("--cidr-allocator-type=%s and --cloud-providers-file do not go together: pod CIDRs come from one range for all providers (%s)", nodeipam.CloudAllocator, nodeipam.RangeAllocator))
		}
	case o.CloudProvider == "":
		errs = append(errs, errors.New("--cloud-provider is required (or --cloud-providers-file)"))
	}
	errs = append(errs, o.validateTenants()...)
	errs = append(errs, o.validatePluginToken()...)
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
		if o.LeaderElectResourceLock != "leases" {
			errs = append(errs, fmt.Errorf("--leader-elect-resource-lock %q: only leases is supported (endpoints and configmaps locks were removed from Kubernetes)", o.LeaderElectResourceLock))
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
		{"--concurrent-node-lifecycle-syncs", o.ConcurrentNodeLifecycleSyncs > 0},
		{"--concurrent-service-syncs", o.ConcurrentServiceSyncs > 0},
		{"--node-monitor-period", o.NodeMonitorPeriod > 0},
		{"--node-status-update-frequency", o.NodeStatusUpdateFrequency > 0},
		{"--kube-api-qps", o.KubeAPIQPS > 0},
		{"--kube-api-burst", o.KubeAPIBurst > 0},
		{"--cloud-call-timeout", o.CloudCallTimeout > 0},
		{"--min-resync-period", o.MinResyncPeriod > 0},
		{"--route-reconciliation-period", o.RouteReconciliationPeriod > 0},
	}
	for _, p := range positive {
		if !p.ok {
			errs = append(errs, fmt.Errorf("%s must be positive", p.name))
		}
	}
	if o.ConcurrentNodeStatusUpdates < 0 {
		errs = append(errs, errors.New("--concurrent-node-status-updates must not be negative"))
	}
	// The IPAM flags are read by Outrigger's node IPAM alone: a binary
	// without it (a provider's main, whose initializer may allocate CIDRs
	// itself, as Linode's) leaves them to the provider, as upstream's
	// cloud-controller-manager does.
	ipam := slices.Contains(o.builtin(), nodeipam.Name)
	if !ipam && o.ClusterCIDR != "" && o.ConfigureCloudRoutes && slices.Contains(o.builtin(), route.Name) {
		// The route controller still routes inside --cluster-cidr.
		if _, err := nodeipam.ParseClusterCIDRs(o.ClusterCIDR); err != nil {
			errs = append(errs, err)
		}
	}
	if ipam && (o.AllocateNodeCIDRs || o.ClusterCIDR != "") {
		if o.AllocateNodeCIDRs && o.ClusterCIDR == "" {
			errs = append(errs, errors.New("--allocate-node-cidrs needs --cluster-cidr"))
		} else if cidrs, err := nodeipam.ParseClusterCIDRs(o.ClusterCIDR); err != nil {
			errs = append(errs, err)
		} else if err := nodeipam.ValidateRanges(cidrs, o.NodeCIDRMaskSizeIPv4, o.NodeCIDRMaskSizeIPv6); o.AllocateNodeCIDRs && o.CIDRAllocatorType == nodeipam.RangeAllocator && err != nil {
			errs = append(errs, err)
		}
	}
	if ipam && o.AllocateNodeCIDRs {
		if o.CIDRAllocatorType != nodeipam.RangeAllocator && o.CIDRAllocatorType != nodeipam.CloudAllocator {
			errs = append(errs, fmt.Errorf("--cidr-allocator-type %q: use %s or %s", o.CIDRAllocatorType, nodeipam.RangeAllocator, nodeipam.CloudAllocator))
		}
		if o.NodeCIDRMaskSizeIPv4 < 1 || o.NodeCIDRMaskSizeIPv4 > 32 || o.NodeCIDRMaskSizeIPv6 < 1 || o.NodeCIDRMaskSizeIPv6 > 128 {
			errs = append(errs, fmt.Errorf("--node-cidr-mask-size-ipv4 (%d) must be 1-32 and --node-cidr-mask-size-ipv6 (%d) 1-128", o.NodeCIDRMaskSizeIPv4, o.NodeCIDRMaskSizeIPv6))
		}
	}
	if _, err := platform.Parse(o.CloudProviderPlatforms); err != nil {
		errs = append(errs, fmt.Errorf("--cloud-provider-platforms: %w", err))
	}
	if o.OrphanSweepPeriod < 0 {
		errs = append(errs, errors.New("--load-balancer-orphan-sweep-period must not be negative"))
	}
	if o.ProviderIDWait <= 0 {
		errs = append(errs, errors.New("--provider-id-wait must be positive"))
	}
	if o.LoadBalancerClass != "" {
		for _, msg := range validation.IsQualifiedName(o.LoadBalancerClass) {
			errs = append(errs, fmt.Errorf("--load-balancer-class %q: %s", o.LoadBalancerClass, msg))
		}
	}
	for _, msg := range validation.IsDNS1123Label(o.GatewayNamespace) {
		errs = append(errs, fmt.Errorf("--gateway-namespace %q: %s", o.GatewayNamespace, msg))
	}
	if o.CloudQPS < 0 || o.CloudBurst < 0 {
		errs = append(errs, errors.New("--cloud-qps and --cloud-burst must not be negative"))
	}
	errs = append(errs, o.Serving.Validate()...)
	for _, w := range o.Webhooks {
		if name := strings.TrimPrefix(w, "-"); name != "" && name != "*" && !slices.Contains(o.webhooks(), name) {
			errs = append(errs, fmt.Errorf("--webhooks: unknown webhook %q (this build has %s)", w, webhookList(o.webhooks())))
		}
	}
	if err := logsapi.Validate(o.Logs, featureGate, nil).ToAggregate(); err != nil {
		errs = append(errs, err)
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
		msgs[i] = strings.ReplaceAll(e.Error(), "\n", " ")
	}
	return errors.New(strings.Join(msgs, "; "))
}

// EnabledControllers resolves --controllers into the controllers to run,
// by their canonical names: Outrigger's in start order, then the provider's
// own (Options.Extension) in theirs. As upstream, '*' leaves out those
// disabled by default, which run only when named.
func (o *Options) EnabledControllers() ([]string, error) {
	builtin := o.builtin()
	known := slices.Clone(builtin)
	off := map[string]bool{}
	for _, c := range o.extraControllers() {
		known = append(known, c.Name)
	}
	if o.Extension != nil {
		for _, name := range o.Extension.DisabledByDefault {
			off[name] = true
		}
	}
	aliases := maps.Clone(flagAliases)
	if o.Extension != nil {
		maps.Copy(aliases, o.Extension.Aliases)
	}
	all := false
	enabled := map[string]bool{}
	disabled := map[string]bool{}
	for _, c := range o.Controllers {
		c = strings.TrimSpace(c)
		name, minus := strings.CutPrefix(c, "-")
		if canonical, ok := aliases[name]; ok {
			name = canonical
		}
		switch {
		case c == "*":
			all = true
			continue
		case slices.Contains(known, name):
		default:
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s; aliases: %s)", c, strings.Join(known, ", "), aliasNames(aliases))
		}
		if minus {
			disabled[name] = true
		} else {
			enabled[name] = true
		}
	}
	var out []string
	for _, name := range known {
		if !disabled[name] && (enabled[name] || all && !off[name]) {
			out = append(out, name)
		}
	}
	return out, nil
}

// webhooks are the provider's webhooks (Extension.Webhooks).
func (o *Options) webhooks() []string {
	if o.Extension == nil {
		return nil
	}
	return o.Extension.Webhooks
}

func webhookList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
