package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	corev1 "k8s.io/api/core/v1"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Run validates opts, builds the provider and runs the manager until ctx
// ends. Errors are worded for the person who typed the flags.
func Run(ctx context.Context, opts *Options, reg *provider.Registry) error {
	mgr, err := New(ctx, opts, reg)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// New validates opts and builds a manager with the enabled controllers, ready
// to Start. Tests and `outrigger dev` use it to run Outrigger in-process.
func New(ctx context.Context, opts *Options, reg *provider.Registry) (manager.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.tenantMode() {
		return newTenantMode(ctx, opts, reg)
	}
	log := klog.FromContext(ctx)
	opts.warnIgnored(log)
	enabled, _ := opts.EnabledControllers()
	var migration *migrationConfig
	if opts.EnableLeaderMigration {
		var err error
		var extra []string
		for _, c := range opts.extraControllers() {
			extra = append(extra, c.Name)
		}
		if ext := opts.Extension; ext != nil && ext.LeaderMigration != nil {
			migration, err = fromUpstream(ext.LeaderMigration, extra...)
		} else {
			migration, err = loadMigrationConfig(opts.LeaderMigrationConfig, extra...)
		}
		if err != nil {
			return nil, err
		}
	}
	restConfig, err := restConfig(opts)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restConfig, managerOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	coreClient, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	informers := newSharedInformers(mgr.GetCache(), mgr.GetScheme(), coreClient)
	if ext := opts.Extension; ext != nil && ext.Prepare != nil {
		if err := ext.Prepare(mgr, informers); err != nil {
			return nil, err
		}
	}
	units, err := buildUnits(opts, reg)
	if err != nil {
		return nil, err
	}
	if err := checkUnits(units); err != nil {
		return nil, err
	}
	// Upstream's app.Run leaves the cluster ID to the cloud initializer
	// (its sample's refuses an untagged cloud, DigitalOcean's does not):
	// a provider's own main (an Extension) gets the same, Outrigger's own
	// binary refuses as upstream's sample does.
	for _, u := range units {
		if opts.Extension == nil && !u.provider.HasClusterID() {
			if !opts.AllowUntaggedCloud {
				return nil, fmt.Errorf("provider %q reports no cluster ID, which it needs to tell this cluster's cloud resources from others'; tag the cluster, or pass --allow-untagged-cloud", u.name)
			}
			log.Info("Warning: the provider reports no cluster ID; a cluster ID will be required in the future, tag your cluster", "provider", u.name)
		}
	}

	readyz := map[string]healthz.Checker{"ping": healthz.Ping}
	health := &healthChecks{}
	if ext := opts.Extension; ext != nil {
		health.added = ext.HealthCheck
	}
	port, err := securePort(ctx, opts, restConfig, readyz, health)
	if err != nil {
		return nil, err
	}
	// Ready once the node cache has synced: before that, this replica could
	// not do the leader's work if it took over.
	readyz["informer-sync"] = func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced yet")
		}
		return nil
	}
	// A provider that can tell whether it is ready (a plugin) makes this
	// replica unready when it is not.
	for _, u := range units {
		if p, ok := u.provider.(interface{ Ready(context.Context) error }); ok {
			check := "provider"
			if u.tag != "" {
				check += "-" + u.tag
			}
			readyz[check] = cachedCheck(time.Second, p.Ready)
		}
	}
	// Degraded method families, by "provider/family" (the layers are
	// built below, before anything asks).
	degraded := func() map[string]int64 {
		out := map[string]int64{}
		for _, u := range units {
			if u.layer == nil {
				continue
			}
			for f, n := range u.layer.Degraded() {
				out[u.name+"/"+string(f)] = n
			}
		}
		return out
	}
	if err := addConsole(mgr, port, restConfig, opts, units, degradedList(degraded)); err != nil {
		return nil, err
	}
	cluster, err := addClusterIdentity(mgr, restConfig, opts)
	if err != nil {
		return nil, err
	}
	for _, u := range units {
		u.init = newProviderInit(u.provider, u.name, restConfig, opts, cluster, informers)
		if err := mgr.Add(u.init); err != nil {
			return nil, err
		}
		lo := opts.callLayer()
		lo.Name = u.name
		// The node controller's address refresh period: a node it
		// initialized is not asked about again by the refresh before.
		lo.RefreshPeriod = opts.NodeStatusUpdateFrequency
		if t := opts.tenant; t != nil {
			// The account's budget, shared in turn with the other
			// tenants on the same cloud account.
			lo.Account, lo.Tenant = t.account, t.name
		}
		u.layer = cloud.New(u.provider, lo)
	}
	// A provider hung on many objects makes this replica unready, naming
	// the method family: the work of other objects goes on meanwhile.
	readyz["cloud-calls"] = func(*http.Request) error {
		if d := degradedList(degraded)(); len(d) > 0 {
			return fmt.Errorf("provider calls abandoned at their deadline and not returned, by provider/method family: %s", strings.Join(d, "; "))
		}
		return nil
	}
	if err := mgr.Add(&degradedEvents{
		degraded: degraded,
		recorder: mgr.GetEventRecorderFor("cloud-controller-manager"), //nolint:staticcheck // core/v1 Events, as upstream writes them
		lease: &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: opts.LeaderElectResourceNamespace, Name: opts.LeaderElectResourceName},
		period: 5 * time.Second,
	}); err != nil {
		return nil, err
	}
	var siblings *node.Siblings
	if len(units) > 1 {
		names := make([]string, len(units))
		for i, u := range units {
			names[i] = u.name
		}
		siblings = node.NewSiblings(allPlatforms(units), names)
	}
	ids, err := newIdentities(mgr, restConfig, opts)
	if err != nil {
		return nil, err
	}
	migrated := &deferringManager{Manager: mgr}
	// The provider's own controllers, under the main lease or, as
	// upstream's, under the migration lease when the migration
	// configuration names them.
	var extra, extraMigrated []Controller
	for _, c := range opts.extraControllers() {
		if !slices.Contains(enabled, c.Name) {
			continue
		}
		if migration != nil {
			switch role, component := migration.role(c.Name); role {
			case roleOther:
				log.Info("Not running provider controller: leader migration assigns it to another component", "controller", c.Name, "component", component)
				continue
			case roleMigrated:
				extraMigrated = append(extraMigrated, c)
				log.Info("Enabled provider controller", "controller", c.Name, "lease", migration.LeaderName)
				continue
			}
		}
		extra = append(extra, c)
		log.Info("Enabled provider controller", "controller", c.Name, "lease", "main")
	}
	for _, group := range []struct {
		controllers []Controller
		target      manager.Manager
		lease       string
	}{{extra, mgr, opts.LeaderElectResourceName}, {extraMigrated, migrated, ""}} {
		if len(group.controllers) == 0 {
			continue
		}
		lease := group.lease
		if lease == "" {
			lease = migration.LeaderName
		}
		// After the provider's Initialize, as upstream starts them.
		pc := &providerControllers{controllers: group.controllers, started: opts.Extension.Started, health: health,
			recorder: mgr.GetEventRecorderFor("cloud-controller-manager"), //nolint:staticcheck // core/v1 Events, as upstream writes them
			lease: &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
				Namespace: opts.LeaderElectResourceNamespace, Name: lease}}
		if err := (afterInit{Manager: group.target, done: units[0].init.done}).Add(pc); err != nil {
			return nil, err
		}
	}
	for _, name := range enabled {
		if !slices.Contains(shippedControllers, name) {
			continue
		}
		target := mgr
		lease := "main"
		if migration != nil {
			switch role, component := migration.role(name); role {
			case roleOther:
				log.Info("Not running controller: leader migration assigns it to another component", "controller", name, "component", component)
				continue
			case roleMigrated:
				target, lease = migrated, migration.LeaderName
			}
		}
		if name == gateway.Name {
			// Before its identity is made: a cluster without the Gateway
			// API gets no gateway-controller ServiceAccount.
			if skip := gatewayAPIServed(mgr); skip != "" {
				log.Info("Not running controller", "controller", name, "reason", skip)
				continue
			}
		}
		target, err = ids.forController(target, name)
		if err != nil {
			return nil, err
		}
		// Node IPAM is the cluster's, whichever provider a node has; every
		// other controller runs once per provider, for its own objects.
		each := units
		if name == nodeipam.Name {
			each = units[:1]
		}
		for _, u := range each {
			skip := skipController(name, u, opts)
			if skip == "" && name == gateway.Name {
				skip = gatewayAPIAllowed(ctx, target)
			}
			if skip != "" {
				log.Info("Not running controller", "controller", name, "provider", u.name, "reason", skip)
				continue
			}
			if err := setupController(ctx, afterInit{Manager: target, done: u.init.done}, name, u, units, siblings, opts); err != nil {
				return nil, err
			}
			// As upstream, /healthz/<name> for every controller that runs.
			health.add(name, healthz.Ping)
			log.Info("Enabled controller", "controller", name, "provider", u.name, "lease", lease)
		}
	}
	if len(migrated.runnables) > 0 {
		client, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			return nil, fmt.Errorf("leader migration client: %w", err)
		}
		if err := mgr.Add(&migrationLease{cfg: migration, opts: opts, client: client, runnables: migrated.runnables}); err != nil {
			return nil, err
		}
	}
	if port != nil {
		return servingManager{Manager: mgr, port: port}, nil
	}
	return mgr, nil
}

// skipController says why a controller does not run for a provider, or "".
// As upstream, a controller whose feature is off or whose provider
// interface is missing is skipped with a log line, not an error: a provider
// with only load balancers runs with the default --controllers.
func skipController(name string, u *unit, opts *Options) string {
	switch name {
	case node.Name, nodelifecycle.Name:
		if _, ok := u.layer.Instances(); !ok {
			return fmt.Sprintf("provider %q supports neither InstancesV2 nor Instances", u.name)
		}
	case service.Name:
		if _, ok := u.layer.LoadBalancer(); !ok {
			return fmt.Sprintf("provider %q has no load balancers", u.name)
		}
	case gateway.Name:
		// The provider's own layer-7 load balancers serve Gateways without
		// a Service; otherwise a Service of type LoadBalancer does.
		if _, ok := u.layer.GatewayLoadBalancer(); ok {
			break
		}
		if _, ok := u.layer.LoadBalancer(); !ok {
			return fmt.Sprintf("provider %q has no load balancers", u.name)
		}
		if enabled, _ := opts.EnabledControllers(); !slices.Contains(enabled, service.Name) {
			return "Gateways are served through the service controller, which is off"
		}
	case nodeipam.Name:
		if !opts.AllocateNodeCIDRs {
			return "--allocate-node-cidrs is false"
		}
	case route.Name:
		switch _, ok := u.layer.Routes(); {
		case !opts.ConfigureCloudRoutes:
			return "--configure-cloud-routes is false"
		case !ok:
			return fmt.Sprintf("--configure-cloud-routes is set, but provider %q has no routes", u.name)
		case opts.ClusterCIDR == "":
			return "--configure-cloud-routes needs --cluster-cidr"
		}
	}
	return ""
}

// setupController adds one controller for provider u to mgr; units are all
// of this Outrigger's providers, siblings their node controllers' meeting
// point (nil with one provider).
func setupController(ctx context.Context, mgr manager.Manager, name string, u *unit, units []*unit, siblings *node.Siblings, opts *Options) error {
	layer := u.layer
	switch name {
	case node.Name:
		instances, _ := layer.Instances()
		return node.Setup(mgr, node.Options{
			Instances:      instances,
			Workers:        opts.NodeWorkers(),
			RefreshPeriod:  opts.NodeStatusUpdateFrequency,
			Platforms:      u.platforms,
			ProviderIDWait: opts.ProviderIDWait,
			Provider:       u.tag,
			Siblings:       siblings,
		})
	case nodelifecycle.Name:
		instances, _ := layer.Instances()
		return nodelifecycle.Setup(mgr, nodelifecycle.Options{
			Instances:     instances,
			MonitorPeriod: opts.NodeMonitorPeriod,
			Workers:       opts.LifecycleWorkers(),
			Platforms:     u.platforms,
			Provider:      u.tag,
		})
	case service.Name:
		// One controller per class: each keeps the finalizers, statuses
		// and ownership records of its own class.
		lb, _ := layer.LoadBalancer()
		for _, class := range u.classes {
			tag := u.tag
			if len(u.classes) > 1 {
				tag += "/" + class
			}
			if err := service.Setup(mgr, service.Options{
				LoadBalancer:      lb,
				ClusterName:       opts.ClusterName,
				Class:             class,
				Workers:           opts.ServiceWorkers(),
				Platforms:         u.platforms,
				OrphanSweepPeriod: opts.OrphanSweepPeriod,
				ClusterID:         u.init.cluster.get,
				Provider:          tag,
			}); err != nil {
				return err
			}
		}
		return nil
	case gateway.Name:
		// One per class, as the service controller: a Gateway's load
		// balancer is a Service of that class, or the provider's own.
		cloudGateways, _ := layer.GatewayLoadBalancer()
		grpc := routeKindServed(ctx, mgr, "GRPCRoute", "grpcroutes")
		if grpc != "" {
			klog.FromContext(ctx).Info("Not serving GRPCRoutes", "provider", u.name, "reason", grpc)
		}
		tlsRoutes := routeKindServed(ctx, mgr, "TLSRoute", "tlsroutes")
		if tlsRoutes != "" {
			klog.FromContext(ctx).Info("Not serving TLSRoutes", "provider", u.name, "reason", tlsRoutes)
		}
		for _, class := range u.classes {
			tag := u.tag
			if len(u.classes) > 1 {
				tag += "/" + class
			}
			if err := gateway.Setup(mgr, gateway.Options{
				ControllerName:    gateway.ControllerNameFor(u.name, class),
				ClassName:         gateway.ClassNameFor(u.name, class),
				LoadBalancerClass: class,
				Provider:          tag,
				Namespace:         opts.GatewayNamespace,
				DataPlaneImage:    opts.GatewayDataPlaneImage,
				Cloud:             cloudGateways,
				ClusterName:       opts.ClusterName,
				ClusterID:         u.init.cluster.get,
				GRPCRoute:         grpc == "",
				TLSRoute:          tlsRoutes == "",
			}); err != nil {
				return err
			}
		}
		return nil
	case nodeipam.Name:
		cidrs, _ := nodeipam.ParseClusterCIDRs(opts.ClusterCIDR)
		src, _ := layer.NodeCIDRs()
		return nodeipam.Setup(mgr, nodeipam.Options{
			Type:         opts.CIDRAllocatorType,
			ClusterCIDRs: cidrs,
			MaskV4:       opts.NodeCIDRMaskSizeIPv4,
			MaskV6:       opts.NodeCIDRMaskSizeIPv6,
			Cloud:        src,
			Workers:      opts.NodeWorkers(),
			Platforms:    allPlatforms(units),
		})
	case route.Name:
		routes, _ := layer.Routes()
		cidrs, _ := nodeipam.ParseClusterCIDRs(opts.ClusterCIDR)
		return route.Setup(mgr, route.Options{
			ServiceCIDRs: mgr.GetAPIReader(),
			Routes:       routes,
			ClusterName:  opts.ClusterName,
			ClusterCIDRs: cidrs,
			Period:       opts.RouteReconciliationPeriod,
			Workers:      opts.NodeWorkers(),
			Platforms:    u.platforms,
			Provider:     u.tag,
		})
	}
	return fmt.Errorf("controller %s has no setup", name)
}

func buildProvider(opts *Options, reg *provider.Registry) (cloudprovider.Interface, error) {
	var config io.Reader
	if t := opts.tenant; t != nil && len(t.cloudConfig) > 0 {
		// The tenant's own, from its Secret: its credentials never pass
		// through a file another tenant could name.
		config = bytes.NewReader(t.cloudConfig)
	} else if opts.CloudConfig != "" {
		f, err := os.Open(opts.CloudConfig)
		if err != nil {
			return nil, fmt.Errorf("cannot read --cloud-config: %w", err)
		}
		defer f.Close()
		config = f
	}
	return reg.New(opts.CloudProvider, config)
}

func restConfig(opts *Options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if ext := opts.Extension; ext != nil && ext.RestConfig != nil {
		// Upstream's config, built by the provider's main: its QPS, burst,
		// content type and user agent are the main's.
		return rest.CopyConfig(ext.RestConfig), nil
	}
	if t := opts.tenant; t != nil {
		// The tenant's API server, from its kubeconfig Secret or file.
		cfg = rest.CopyConfig(t.restConfig)
	} else if opts.Kubeconfig == "" && opts.Master == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or --master given and not running in a cluster: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags(opts.Master, opts.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig %q: %w", opts.Kubeconfig, err)
		}
	}
	cfg.QPS = opts.APIQPS()
	cfg.Burst = opts.APIBurst()
	// Left at upstream's default (protobuf), Outrigger talks JSON, which
	// measured faster for its client (docs/performance.md); given, the
	// flag is honoured.
	if opts.changed("kube-api-content-type") {
		cfg.ContentType = opts.KubeAPIContentType
	}
	cfg.UserAgent = "outrigger"
	return cfg, nil
}

// managerOptions maps the flags onto controller-runtime's manager. Its
// probe and metrics servers are off: the secure port serves both.
func managerOptions(opts *Options) manager.Options {
	return manager.Options{
		Logger:                        withCleanStop(ctrl.Log.WithName("manager")),
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              opts.LeaderElectResourceName,
		LeaderElectionNamespace:       opts.LeaderElectResourceNamespace,
		LeaderElectionResourceLock:    opts.LeaderElectResourceLock,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(opts.LeaderElectLeaseDuration),
		RenewDeadline:                 ptr.To(opts.LeaderElectRenewDeadline),
		RetryPeriod:                   ptr.To(opts.LeaderElectRetryPeriod),
		// Controllers are named as upstream's; several managers in one
		// process (tests, `outrigger dev`) reuse the names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{
			DefaultTransform: stripUnread,
			SyncPeriod:       ptr.To(opts.MinResyncPeriod),
		},
		HealthProbeBindAddress: "0",
		Metrics:                metricsserver.Options{BindAddress: "0"},
	}
}

// clientBuilder gives providers the API clients upstream's Initialize hands
// them, all from the manager's configuration.
type clientBuilder struct{ cfg *rest.Config }

func (b clientBuilder) Config(name string) (*rest.Config, error) {
	cfg := rest.CopyConfig(b.cfg)
	cfg.UserAgent = "outrigger/" + name
	return cfg, nil
}

func (b clientBuilder) ConfigOrDie(name string) *rest.Config {
	cfg, _ := b.Config(name)
	return cfg
}

func (b clientBuilder) Client(name string) (kubernetes.Interface, error) {
	cfg, _ := b.Config(name)
	return kubernetes.NewForConfig(cfg)
}

func (b clientBuilder) ClientOrDie(name string) kubernetes.Interface {
	c, err := b.Client(name)
	if err != nil {
		panic(fmt.Errorf("building client %s: %w", name, err))
	}
	return c
}

var _ cloudprovider.ControllerClientBuilder = clientBuilder{}

// stripUnread drops from cached objects what no controller reads, a good
// part of the cache's memory at thousands of nodes: managedFields, and a
// node's list of container images (up to 50 entries a kubelet reports by
// default, often the largest part of a node). Controllers only ever patch
// nodes, with diffs between two cached or copied objects, so what is dropped
// here is never written back.
func stripUnread(obj any) (any, error) {
	obj, err := stripManagedFields(obj)
	if err != nil {
		return obj, err
	}
	if node, ok := obj.(*corev1.Node); ok {
		node.Status.Images = nil
	}
	return obj, nil
}

var stripManagedFields = cache.TransformStripManagedFields()
