package manager

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/secureserving"
)

// Outrigger's own sizing for the flags whose upstream defaults are sized for
// small clusters. They apply while the flag is left at upstream's default
// and not given on the command line: the cloud-call layer bounds the calls to
// the cloud whatever the worker count, so more workers cost nothing there.
const (
	autoNodeWorkers    = 256
	autoServiceWorkers = 256
	// No client-side limit: the API server's priority and fairness paces
	// the client (its 429s are retried after their Retry-After by
	// client-go), as controller-runtime's own configs do. A fixed client
	// limit was the pace of a burst of joining nodes.
	autoKubeAPIQPS   = -1
	autoKubeAPIBurst = 1000

	upstreamNodeWorkers    = 1
	upstreamServiceWorkers = 1
	upstreamKubeAPIQPS     = 20
	upstreamKubeAPIBurst   = 30
)

// Options are the command's flags: every flag of the upstream
// cloud-controller-manager with its name, type and default, and Outrigger's
// own. docs/flags.md is generated from them.
type Options struct {
	// generic
	CloudProvider                string
	CloudConfig                  string
	AllowUntaggedCloud           bool
	ExternalCloudVolumePlugin    string
	Kubeconfig                   string
	Master                       string
	Controllers                  []string
	ClusterName                  string
	ControllerStartInterval      time.Duration
	MinResyncPeriod              time.Duration
	NodeSyncPeriod               time.Duration
	UseServiceAccountCredentials bool
	KubeAPIQPS                   float32
	KubeAPIBurst                 int32
	KubeAPIContentType           string
	LeaderElect                  bool
	LeaderElectLeaseDuration     time.Duration
	LeaderElectRenewDeadline     time.Duration
	LeaderElectRetryPeriod       time.Duration
	LeaderElectResourceLock      string
	LeaderElectResourceName      string
	LeaderElectResourceNamespace string
	EnableLeaderMigration        bool
	LeaderMigrationConfig        string
	Profiling                    bool
	ContentionProfiling          bool
	ConcurrentNodeSyncs          int32
	ConcurrentNodeStatusUpdates  int32
	ConcurrentNodeLifecycleSyncs int32
	ConcurrentServiceSyncs       int32
	NodeMonitorPeriod            time.Duration
	NodeStatusUpdateFrequency    time.Duration
	AllocateNodeCIDRs            bool
	ClusterCIDR                  string
	CIDRAllocatorType            string
	ConfigureCloudRoutes         bool
	RouteReconciliationPeriod    time.Duration
	Webhooks                     []string
	Serving                      secureserving.ServingOptions
	WebhookServing               secureserving.ServingOptions
	Authentication               secureserving.AuthenticationOptions
	Authorization                secureserving.AuthorizationOptions
	Logs                         *logsapi.LoggingConfiguration
	Version                      versionFlag

	// Outrigger's own.
	LoadBalancerClass            string
	CloudProviderPlatforms       []string
	CloudProvidersFile           string
	ProviderIDWait               time.Duration
	OrphanSweepPeriod            time.Duration
	NodeCIDRMaskSizeIPv4         int
	NodeCIDRMaskSizeIPv6         int
	CloudQPS                     float64
	CloudBurst                   int
	CloudCallTimeout             time.Duration
	DisableMetricsAuthentication bool
	GatewayNamespace             string
	GatewayNamespaceMode         gateway.NamespaceMode
	GatewayDataPlaneImage        string
	TenantsNamespace             string
	TenantsSelector              string
	TenantsDir                   string
	TenantsReplicaID             string
	PluginServiceAccount         serviceAccountRef
	PluginAPIAccessDir           string

	// tenant is set on the copy of the options one tenant's manager is
	// built from (tenant mode); nil otherwise.
	tenant *tenantRun

	// Extension is what a provider's own main adds (package app); nil
	// for Outrigger's own binaries.
	Extension *Extension

	// flags is the flag set AddFlags registered on, to tell a flag the
	// user gave from one left at its default.
	flags *pflag.FlagSet
	// own are Outrigger's own flags on a yielding command, which a
	// provider's flag of the same name may replace (TakeYielded).
	own *pflag.FlagSet
}

// NewOptions returns upstream's defaults.
func NewOptions() *Options {
	return &Options{
		Controllers:                  []string{"*"},
		ClusterName:                  "kubernetes",
		MinResyncPeriod:              12 * time.Hour,
		KubeAPIQPS:                   upstreamKubeAPIQPS,
		KubeAPIBurst:                 upstreamKubeAPIBurst,
		KubeAPIContentType:           "application/vnd.kubernetes.protobuf",
		LeaderElect:                  true,
		LeaderElectLeaseDuration:     15 * time.Second,
		LeaderElectRenewDeadline:     10 * time.Second,
		LeaderElectRetryPeriod:       2 * time.Second,
		LeaderElectResourceLock:      "leases",
		LeaderElectResourceName:      "cloud-controller-manager",
		LeaderElectResourceNamespace: "kube-system",
		Profiling:                    true,
		ConcurrentNodeSyncs:          upstreamNodeWorkers,
		ConcurrentNodeLifecycleSyncs: upstreamNodeWorkers,
		ConcurrentServiceSyncs:       upstreamServiceWorkers,
		NodeMonitorPeriod:            5 * time.Second,
		NodeStatusUpdateFrequency:    5 * time.Minute,
		CIDRAllocatorType:            nodeipam.RangeAllocator,
		ConfigureCloudRoutes:         true,
		RouteReconciliationPeriod:    10 * time.Second,
		Serving:                      secureserving.ServingOptions{BindAddress: net.IPv4zero, BindPort: 10258},
		WebhookServing:               secureserving.ServingOptions{BindAddress: net.IPv4zero, BindPort: 10260},
		Authentication: secureserving.AuthenticationOptions{
			CacheTTL:                   10 * time.Second,
			RequestHeaderUsernames:     []string{"x-remote-user"},
			RequestHeaderGroups:        []string{"x-remote-group"},
			RequestHeaderExtraPrefixes: []string{"x-remote-extra-"},
		},
		Authorization: secureserving.AuthorizationOptions{
			AlwaysAllowPaths: []string{"/healthz", "/readyz", "/livez"},
			AllowCacheTTL:    10 * time.Second,
			DenyCacheTTL:     10 * time.Second,
		},
		Logs:                 logsapi.NewLoggingConfiguration(),
		NodeCIDRMaskSizeIPv4: 24,
		NodeCIDRMaskSizeIPv6: 64,
		CloudQPS:             0,
		CloudBurst:           0,
		CloudCallTimeout:     30 * time.Second,
		ProviderIDWait:       node.ProviderIDWait,
		OrphanSweepPeriod:    5 * time.Minute,
		GatewayNamespace:     gateway.DefaultNamespace,
		GatewayNamespaceMode: gateway.NamespaceShared,
	}
}

// AddFlags registers every flag on fs and returns them by --help section.
func (o *Options) AddFlags(fs *pflag.FlagSet) cliflag.NamedFlagSets {
	nfs := o.flagSets()
	for _, name := range flagSections {
		fs.AddFlagSet(nfs.FlagSet(name))
	}
	o.flags = fs
	return nfs
}

// flagSections is the order of --help's sections, upstream's first.
var flagSections = []string{
	"generic", "debugging", "leader-migration",
	"cloud-node-controller", "cloud-node-lifecycle-controller", "service-lb-controller",
	"webhook", "webhook serving", "secure serving", "authentication", "authorization",
	"misc", "outrigger", "logs", "global",
}

// flagSets builds the flags, by --help section, bound to o's fields.
func (o *Options) flagSets() cliflag.NamedFlagSets {
	var nfs cliflag.NamedFlagSets
	for _, name := range flagSections {
		nfs.FlagSet(name)
	}
	fs := nfs.FlagSet("generic")
	fs.StringVar(&o.CloudProvider, "cloud-provider", o.CloudProvider, "The provider to run (required); the error for an unknown name lists this binary's providers.")
	fs.StringVar(&o.CloudConfig, "cloud-config", o.CloudConfig, "Path to the provider's configuration file.")
	fs.BoolVar(&o.AllowUntaggedCloud, "allow-untagged-cloud", o.AllowUntaggedCloud, "Run even when the provider reports no cluster ID (HasClusterID false), with a warning.")
	fs.StringVar(&o.ExternalCloudVolumePlugin, "external-cloud-volume-plugin", o.ExternalCloudVolumePlugin, "Accepted for compatibility; has no effect (see docs/flags.md).")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "Controllers to run: '*' for all, 'name' to enable, '-name' to disable. Names: "+strings.Join(shippedControllers, ", ")+"; upstream's aliases "+aliasList()+" are accepted.")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "The cluster's name, which providers tag cloud resources with (route names, load balancer tags).")
	fs.DurationVar(&o.ControllerStartInterval, "controller-start-interval", o.ControllerStartInterval, "Accepted for compatibility; has no effect (see docs/flags.md).")
	fs.DurationVar(&o.MinResyncPeriod, "min-resync-period", o.MinResyncPeriod, "The informers' resync period: a random time between it and twice it.")
	fs.DurationVar(&o.NodeSyncPeriod, "node-sync-period", o.NodeSyncPeriod, "Accepted for compatibility; has no effect, as upstream (see docs/flags.md).")
	fs.BoolVar(&o.UseServiceAccountCredentials, "use-service-account-credentials", o.UseServiceAccountCredentials, "Each controller acts as its own ServiceAccount in kube-system, with a token from the TokenRequest API.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the API server. Left at the default, Outrigger sets no client-side limit: the API server's priority and fairness paces it.")
	fs.Int32Var(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server, with --kube-api-qps. Left at the default with --kube-api-qps unset, no client-side limit applies.")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", o.KubeAPIContentType, "Content type of requests to the API server. Left at the default, Outrigger uses JSON, which measured faster for its client.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease before running controllers; run several replicas for availability.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long a non-leader waits after the last renewal before taking over.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the leader keeps trying to renew before giving up leadership.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "How long candidates wait between attempts to acquire or renew.")
	fs.StringVar(&o.LeaderElectResourceLock, "leader-elect-resource-lock", o.LeaderElectResourceLock, "The kind of lock object for leader election: 'leases' (the only kind current Kubernetes supports).")
	fs.StringVar(&o.LeaderElectResourceName, "leader-elect-resource-name", o.LeaderElectResourceName, "Name of the leader election Lease (upstream's by default, so the two never lead at once).")
	fs.StringVar(&o.LeaderElectResourceNamespace, "leader-elect-resource-namespace", o.LeaderElectResourceNamespace, "Namespace of the leader election Lease.")
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "Give every node pod CIDRs (node-ipam-controller).")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "The cluster's pod CIDR: one, or an IPv4 and an IPv6 one separated by a comma (dual-stack).")
	fs.StringVar(&o.CIDRAllocatorType, "cidr-allocator-type", o.CIDRAllocatorType, "RangeAllocator (CIDRs cut from --cluster-cidr) or CloudAllocator (the provider assigns them).")
	fs.BoolVar(&o.ConfigureCloudRoutes, "configure-cloud-routes", o.ConfigureCloudRoutes, "Create a cloud route for every node's pod CIDRs (needs --cluster-cidr and a provider with routes; the CIDRs may come from any IPAM).")
	fs.DurationVar(&o.RouteReconciliationPeriod, "route-reconciliation-period", o.RouteReconciliationPeriod, "How often all routes are compared with the nodes, besides on node changes.")
	featureGate.AddFlag(fs)

	fs = nfs.FlagSet("debugging")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve /debug/pprof on the secure port (authorized as /metrics is).")
	fs.BoolVar(&o.ContentionProfiling, "contention-profiling", o.ContentionProfiling, "With --profiling, also record block and mutex contention.")

	fs = nfs.FlagSet("leader-migration")
	fs.BoolVar(&o.EnableLeaderMigration, "enable-leader-migration", o.EnableLeaderMigration, "Take part in leader migration (KEP-2436): run the controllers a migration config assigns to cloud-controller-manager (or '*') only while holding the migration lease, and not those it assigns to another component.")
	fs.StringVar(&o.LeaderMigrationConfig, "leader-migration-config", o.LeaderMigrationConfig, "Path to a LeaderMigrationConfiguration (upstream's format). Default: routes, services and node lifecycle move, under the lease cloud-provider-extraction-migration.")

	fs = nfs.FlagSet("cloud-node-controller")
	fs.Int32Var(&o.ConcurrentNodeSyncs, "concurrent-node-syncs", o.ConcurrentNodeSyncs, fmt.Sprintf("Nodes initialized at once. Left at the default, Outrigger uses %d: the call layer adapts cloud calls to what the cloud accepts whatever this is.", autoNodeWorkers))
	fs.Int32Var(&o.ConcurrentNodeStatusUpdates, "concurrent-node-status-updates", o.ConcurrentNodeStatusUpdates, "Parallel node address updates of the periodic refresh; 0 uses --concurrent-node-syncs.")
	fs.DurationVar(&o.NodeStatusUpdateFrequency, "node-status-update-frequency", o.NodeStatusUpdateFrequency, "How often every node's addresses are refreshed from the cloud.")

	fs = nfs.FlagSet("cloud-node-lifecycle-controller")
	fs.Int32Var(&o.ConcurrentNodeLifecycleSyncs, "concurrent-node-lifecycle-syncs", o.ConcurrentNodeLifecycleSyncs, fmt.Sprintf("Nodes checked against the cloud at once. Left at the default, Outrigger uses %d.", autoNodeWorkers))
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "How often NotReady nodes are checked against the cloud (deleted when gone, tainted when shut down).")

	fs = nfs.FlagSet("service-lb-controller")
	fs.Int32Var(&o.ConcurrentServiceSyncs, "concurrent-service-syncs", o.ConcurrentServiceSyncs, fmt.Sprintf("Load balancer Services synced at once. Left at the default, Outrigger uses %d: the call layer adapts cloud calls to what the cloud accepts whatever this is.", autoServiceWorkers))

	fs = nfs.FlagSet("webhook")
	fs.StringSliceVar(&o.Webhooks, "webhooks", o.Webhooks, "Webhooks to serve, of those a provider's main registers (package app's CommandBuilder): '*' for those enabled by default, 'name' to enable, '-name' to disable. Outrigger's own binary has none, as upstream's sample.")
	addServingFlags(nfs.FlagSet("webhook serving"), &o.WebhookServing, "webhook-", "The webhook port's, where a provider's main serves its webhooks (package app); Outrigger's own binary serves none.")
	addServingFlags(nfs.FlagSet("secure serving"), &o.Serving, "", "")
	addAuthenticationFlags(nfs.FlagSet("authentication"), &o.Authentication)
	addAuthorizationFlags(nfs.FlagSet("authorization"), &o.Authorization)

	fs = nfs.FlagSet("misc")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster configuration.")
	fs.StringVar(&o.Master, "master", o.Master, "The API server's address, overriding the kubeconfig's.")

	fs = nfs.FlagSet("outrigger")
	fs.StringVar(&o.LoadBalancerClass, "load-balancer-class", o.LoadBalancerClass, "Own the LoadBalancer Services of this spec.loadBalancerClass instead of those without a class, so several CCMs can share a cluster.")
	fs.StringSliceVar(&o.CloudProviderPlatforms, "cloud-provider-platforms", o.CloudProviderPlatforms, "The providerID schemes (the part before \"://\", as in KEP-5778) of the nodes this CCM serves, e.g. \"aws\"; a node of any other scheme is never initialized, refreshed, tainted, deleted, routed, given a pod CIDR or used as a load balancer backend. Empty: every node, as upstream.")
	fs.DurationVar(&o.OrphanSweepPeriod, "load-balancer-orphan-sweep-period", o.OrphanSweepPeriod, "How often to look for load balancers this cluster and class made (by the provider's ownership record) whose Service no longer exists, and the grace before one is deleted; 0 turns the sweep off.")
	fs.StringVar(&o.CloudProvidersFile, "cloud-providers-file", o.CloudProvidersFile, "Run several providers side by side, listed in this file (kind CloudProviders): each serves the nodes of its providerID schemes and the LoadBalancer Services of its class. Replaces --cloud-provider, --cloud-config, --cloud-provider-platforms and --load-balancer-class.")
	fs.DurationVar(&o.ProviderIDWait, "provider-id-wait", o.ProviderIDWait, "With --cloud-provider-platforms or --cloud-providers-file: how long a new node without a providerID is given for its kubelet to set one before the provider is asked for it by name.")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", o.NodeCIDRMaskSizeIPv4, "Prefix length of each node's IPv4 pod CIDR.")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", o.NodeCIDRMaskSizeIPv6, "Prefix length of each node's IPv6 pod CIDR.")
	fs.Float64Var(&o.CloudQPS, "cloud-qps", o.CloudQPS, "Hard ceiling on calls per second to the cloud provider, across all controllers; 0 (the default) sets none: each method family's limits adapt to the cloud's latency and throttling.")
	fs.IntVar(&o.CloudBurst, "cloud-burst", o.CloudBurst, "Burst of calls to the cloud provider above --cloud-qps, when it is set; 0 means --cloud-qps.")
	fs.DurationVar(&o.CloudCallTimeout, "cloud-call-timeout", o.CloudCallTimeout, "Deadline of one cloud provider call; a call past it fails and is retried with backoff.")
	fs.StringVar(&o.GatewayNamespace, "gateway-namespace", o.GatewayNamespace, "Namespace of every Gateway's data plane (its programming, its load balancer Service, its pods) with --gateway-namespace-mode=shared (the default); the gateway-controller then writes nowhere else, and makes it when missing.")
	fs.Var(&o.GatewayNamespaceMode, "gateway-namespace-mode", "Where each Gateway's data plane (its programming, its load balancer Service, its pods and their identity) is made: shared, in --gateway-namespace; or gateway, in the Gateway's own namespace, which needs the right to write Secrets, Deployments, Services, ServiceAccounts, Roles, RoleBindings and PodDisruptionBudgets in every namespace (deploy/rbac-gateway-namespaces.yaml) and lets GatewayClasses state GatewayInfrastructure.")
	fs.StringVar(&o.GatewayDataPlaneImage, "gateway-data-plane-image", o.GatewayDataPlaneImage, "Image of the Gateways' data plane pods (Outrigger's own image, which runs `outrigger gateway-dataplane`). Empty: no pods are made, and something else must serve the programming (as `outrigger dev` does).")
	fs.StringVar(&o.TenantsNamespace, "tenants-namespace", o.TenantsNamespace, "Tenant mode: serve many clusters from this process. The namespace, in the cluster of --kubeconfig (the management cluster), of the tenants' kubeconfig Secrets and of the Leases that spread the tenants over the replicas (docs/tenants.md).")
	fs.StringVar(&o.TenantsSelector, "tenants-selector", o.TenantsSelector, "Tenant mode: label selector of the tenants' Secrets in --tenants-namespace (key kubeconfig; optional cloud-config and account). Empty: no Secrets, only --tenants-dir.")
	fs.StringVar(&o.TenantsDir, "tenants-dir", o.TenantsDir, "Tenant mode: a directory of kubeconfig files, one tenant each (with --tenants-namespace, for the Leases).")
	fs.StringVar(&o.TenantsReplicaID, "tenants-replica-id", o.TenantsReplicaID, "Tenant mode: this replica's identity in the tenant Leases, distinct for every replica. Empty: the host name and a random suffix.")
	fs.Var(&o.PluginServiceAccount, "plugin-service-account", "NAMESPACE/NAME: a provider plugin's own ServiceAccount (docs/plugins.md). Every replica asks the TokenRequest API for its token (an hour's, replaced at 80 %) and writes it, with the API server's CA and the namespace, into --plugin-api-access-dir, which the plugin's container mounts at /var/run/secrets/kubernetes.io/serviceaccount: the plugin reaches the API as that account, not as Outrigger's.")
	fs.StringVar(&o.PluginAPIAccessDir, "plugin-api-access-dir", o.PluginAPIAccessDir, "With --plugin-service-account: the directory (shared with the plugin's container) the token, ca.crt and namespace files are written to.")
	fs.BoolVar(&o.DisableMetricsAuthentication, "disable-metrics-authentication", o.DisableMetricsAuthentication, "Serve /metrics without authenticating and authorizing the caller (for local development only); /configz, /debug and /console/ still authenticate theirs.")

	logsapi.AddFlags(o.Logs, nfs.FlagSet("logs"))
	fs = nfs.FlagSet("global")
	fs.Var(&o.Version, "version", "--version, --version=raw prints version information and quits.")
	fs.Lookup("version").NoOptDefVal = "true"
	return nfs
}

func addServingFlags(fs *pflag.FlagSet, s *secureserving.ServingOptions, prefix, note string) {
	help := func(h string) string {
		if note != "" {
			return note
		}
		return h
	}
	fs.IPVar(&s.BindAddress, prefix+"bind-address", s.BindAddress, help("Address to serve --secure-port on."))
	fs.IntVar(&s.BindPort, prefix+"secure-port", s.BindPort, help("HTTPS port for /healthz, /readyz, /livez, /metrics, /configz and /debug/pprof; 0 disables serving."))
	fs.StringVar(&s.CertDir, prefix+"cert-dir", s.CertDir, help("Where a self-signed serving certificate is written when --tls-cert-file is not given."))
	fs.StringVar(&s.CertFile, prefix+"tls-cert-file", s.CertFile, help("Serving certificate (PEM, with intermediates). Reloaded when it changes."))
	fs.StringVar(&s.KeyFile, prefix+"tls-private-key-file", s.KeyFile, help("Key of --tls-cert-file."))
	fs.Var(cliflag.NewNamedCertKeyArray(&s.SNICertKeys), prefix+"tls-sni-cert-key", help("certfile,keyfile[:name,...]: a certificate served to clients asking for these names (SNI); may repeat."))
	fs.StringSliceVar(&s.CipherSuites, prefix+"tls-cipher-suites", s.CipherSuites, help("TLS 1.2 cipher suites; default Go's. Names: "+strings.Join(cliflag.PreferredTLSCipherNames(), ", ")+"."))
	fs.Int32SliceVar(&s.CurvePreferences, prefix+"tls-curve-preferences", s.CurvePreferences, help("TLS curve IDs in preference order; default Go's."))
	fs.StringVar(&s.MinTLSVersion, prefix+"tls-min-version", s.MinTLSVersion, help("Minimum TLS version: "+strings.Join(cliflag.TLSPossibleVersions(), ", ")+"."))
	fs.BoolVar(&s.DisableHTTP2, prefix+"disable-http2-serving", s.DisableHTTP2, help("Serve HTTP/1.1 only."))
	fs.IntVar(&s.HTTP2MaxStreamsPerConnection, prefix+"http2-max-streams-per-connection", s.HTTP2MaxStreamsPerConnection, help("Accepted for compatibility; Go's HTTP/2 default applies (see docs/flags.md)."))
	if prefix == "" {
		fs.BoolVar(&s.PermitAddressSharing, "permit-address-sharing", s.PermitAddressSharing, "Listen with SO_REUSEADDR, so a restart binds while the old socket is in TIME_WAIT.")
		fs.BoolVar(&s.PermitPortSharing, "permit-port-sharing", s.PermitPortSharing, "Listen with SO_REUSEPORT, so several processes may bind the port.")
	}
}

func addAuthenticationFlags(fs *pflag.FlagSet, a *secureserving.AuthenticationOptions) {
	fs.StringVar(&a.Kubeconfig, "authentication-kubeconfig", a.Kubeconfig, "Kubeconfig for TokenReview calls that authenticate callers of /metrics and /debug. Empty: the main connection.")
	fs.BoolVar(&a.SkipLookup, "authentication-skip-lookup", a.SkipLookup, "Do not read the client CA and request-header settings from the extension-apiserver-authentication ConfigMap in kube-system.")
	fs.BoolVar(&a.TolerateLookupFailure, "authentication-tolerate-lookup-failure", a.TolerateLookupFailure, "Start even when that ConfigMap cannot be read (callers are then only authenticated by token).")
	fs.DurationVar(&a.CacheTTL, "authentication-token-webhook-cache-ttl", a.CacheTTL, "How long TokenReview answers are cached.")
	fs.StringVar(&a.ClientCAFile, "client-ca-file", a.ClientCAFile, "Authenticate callers presenting a client certificate signed by one of these CAs, as its CommonName.")
	fs.StringVar(&a.RequestHeaderClientCAFile, "requestheader-client-ca-file", a.RequestHeaderClientCAFile, "CAs of the front proxies whose user headers are trusted.")
	fs.StringSliceVar(&a.RequestHeaderAllowedNames, "requestheader-allowed-names", a.RequestHeaderAllowedNames, "Client certificate common names of the trusted front proxies; empty: any signed by --requestheader-client-ca-file.")
	fs.StringSliceVar(&a.RequestHeaderUsernames, "requestheader-username-headers", a.RequestHeaderUsernames, "Request headers holding the user name.")
	fs.StringSliceVar(&a.RequestHeaderUIDs, "requestheader-uid-headers", a.RequestHeaderUIDs, "Request headers holding the user's UID.")
	fs.StringSliceVar(&a.RequestHeaderGroups, "requestheader-group-headers", a.RequestHeaderGroups, "Request headers holding the groups.")
	fs.StringSliceVar(&a.RequestHeaderExtraPrefixes, "requestheader-extra-headers-prefix", a.RequestHeaderExtraPrefixes, "Request header prefixes holding extra user attributes.")
}

func addAuthorizationFlags(fs *pflag.FlagSet, a *secureserving.AuthorizationOptions) {
	fs.StringVar(&a.Kubeconfig, "authorization-kubeconfig", a.Kubeconfig, "Kubeconfig for SubjectAccessReview calls that authorize callers of /metrics and /debug. Empty: the main connection.")
	fs.StringSliceVar(&a.AlwaysAllowPaths, "authorization-always-allow-paths", a.AlwaysAllowPaths, "Paths served without authorization (and without authentication).")
	fs.DurationVar(&a.AllowCacheTTL, "authorization-webhook-cache-authorized-ttl", a.AllowCacheTTL, "How long an allowed SubjectAccessReview is cached.")
	fs.DurationVar(&a.DenyCacheTTL, "authorization-webhook-cache-unauthorized-ttl", a.DenyCacheTTL, "How long a denied SubjectAccessReview is cached.")
}

func aliasList() string { return aliasNames(flagAliases) }

func aliasNames(aliases map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(aliases)), ", ")
}

// changed reports whether the user gave the flag.
func (o *Options) changed(name string) bool {
	return o.flags != nil && o.flags.Changed(name)
}

// NodeWorkers is the node controllers' worker count: --concurrent-node-syncs
// when given, else Outrigger's.
func (o *Options) NodeWorkers() int {
	return auto(o, "concurrent-node-syncs", int(o.ConcurrentNodeSyncs), upstreamNodeWorkers, autoNodeWorkers)
}

// LifecycleWorkers is the lifecycle check's parallelism.
func (o *Options) LifecycleWorkers() int {
	return auto(o, "concurrent-node-lifecycle-syncs", int(o.ConcurrentNodeLifecycleSyncs), upstreamNodeWorkers, autoNodeWorkers)
}

// StatusUpdateWorkers is the address refresh's parallelism.
func (o *Options) StatusUpdateWorkers() int {
	if o.ConcurrentNodeStatusUpdates > 0 {
		return int(o.ConcurrentNodeStatusUpdates)
	}
	return o.NodeWorkers()
}

// ServiceWorkers is the service controller's worker count.
func (o *Options) ServiceWorkers() int {
	return auto(o, "concurrent-service-syncs", int(o.ConcurrentServiceSyncs), upstreamServiceWorkers, autoServiceWorkers)
}

// EventQPS is the Event client's rate and burst: the API client's when
// --kube-api-qps is given, else the kubelet's Event defaults.
func (o *Options) EventQPS() (float32, int) {
	if qps := o.APIQPS(); qps > 0 {
		return qps, o.APIBurst()
	}
	return eventQPS, eventBurst
}

// The kubelet's --event-qps and --event-burst defaults.
const (
	eventQPS   = 50
	eventBurst = 100
)

// APIQPS and APIBurst are the API client's limits.
func (o *Options) APIQPS() float32 {
	return float32(auto(o, "kube-api-qps", int(o.KubeAPIQPS), upstreamKubeAPIQPS, autoKubeAPIQPS))
}

func (o *Options) APIBurst() int {
	return auto(o, "kube-api-burst", int(o.KubeAPIBurst), upstreamKubeAPIBurst, autoKubeAPIBurst)
}

func auto(o *Options, flag string, v, upstream, own int) int {
	if v == upstream && !o.changed(flag) {
		return own
	}
	return v
}

// IgnoredFlags are upstream flags Outrigger accepts so manifests carry over,
// but that change nothing, with the reason: a user who sets one is told once
// at start, and docs/flags.md lists them.
var IgnoredFlags = map[string]string{
	"external-cloud-volume-plugin":     "only kube-controller-manager's in-tree volume plugins read it; a cloud-controller-manager runs no volume controllers",
	"controller-start-interval":        "controllers start together once the shared cache has synced, which is what the interval spread out",
	"node-sync-period":                 "upstream ignores it too (deprecated, no-op)",
	"http2-max-streams-per-connection": "the secure port uses Go's HTTP/2 server defaults (250 streams)",
	"webhooks":                         "this binary has no webhooks (nor has upstream's, without a provider that adds them)",
}

func init() {
	for _, f := range []string{"bind-address", "secure-port", "cert-dir", "tls-cert-file", "tls-private-key-file", "tls-sni-cert-key",
		"tls-cipher-suites", "tls-curve-preferences", "tls-min-version", "disable-http2-serving", "http2-max-streams-per-connection"} {
		IgnoredFlags["webhook-"+f] = "this binary has no webhooks, so there is no webhook port"
	}
}

// warnIgnored logs, once per start, each ignored flag the user gave.
func (o *Options) warnIgnored(log klog.Logger) {
	names := make([]string, 0, len(IgnoredFlags))
	for name := range IgnoredFlags {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		// A provider's webhooks are served on the webhook port (package app).
		if len(o.webhooks()) > 0 && (name == "webhooks" || strings.HasPrefix(name, "webhook-")) {
			continue
		}
		if o.changed(name) {
			log.Info("Warning: flag accepted for compatibility has no effect", "flag", "--"+name, "reason", IgnoredFlags[name])
		}
	}
}

// callLayer is the cloud-call layer's configuration from the flags.
func (o *Options) callLayer() cloud.Options {
	// Under a provider's own main (package app), no deadline unless
	// --cloud-call-timeout is given: upstream's app.Run waits for every
	// call, and OCI's and OpenStack's load balancer calls wait minutes on
	// the cloud's work requests. Outrigger's own binary keeps its default.
	timeout := o.CloudCallTimeout
	if o.Extension != nil && !o.changed("cloud-call-timeout") {
		timeout = cloud.NoTimeout
	}
	return cloud.Options{QPS: o.CloudQPS, Burst: o.CloudBurst, Timeout: timeout,
		NoBatch: !featureGate.Enabled(BatchInstanceLookups),
		// Answers are shared no longer than the lifecycle monitor's
		// period, so it notices a vanished or stopped instance no later
		// than asking itself each pass would.
		ShareWindow: o.NodeMonitorPeriod}
}
