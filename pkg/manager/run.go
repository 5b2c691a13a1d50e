package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	corev1 "k8s.io/api/core/v1"
	"net/http"
	"os"
	"slices"
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

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/node"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/route"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/service"
	"github.com/outrigger-ccm/outrigger/pkg/platform"
	contract "github.com/outrigger-ccm/outrigger/pkg/provider"
	"github.com/outrigger-ccm/outrigger/pkg/providers"
)

// Run validates opts, builds the provider and runs the manager until ctx
// ends. Errors are worded for the person who typed the flags.
func Run(ctx context.Context, opts *Options, reg *providers.Registry) error {
	mgr, err := New(ctx, opts, reg)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// New validates opts and builds a manager with the enabled controllers, ready
// to Start. Tests and `outrigger dev` use it to run Outrigger in-process.
func New(ctx context.Context, opts *Options, reg *providers.Registry) (manager.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx)
	opts.warnIgnored(log)
	enabled, _ := opts.EnabledControllers()
	var migration *migrationConfig
	if opts.EnableLeaderMigration {
		var err error
		if migration, err = loadMigrationConfig(opts.LeaderMigrationConfig); err != nil {
			return nil, err
		}
	}
	provider, err := buildProvider(opts, reg)
	if err != nil {
		return nil, err
	}
	if !provider.HasClusterID() {
		if !opts.AllowUntaggedCloud {
			return nil, fmt.Errorf("provider %q reports no cluster ID, which it needs to tell this cluster's cloud resources from others'; tag the cluster, or pass --allow-untagged-cloud", opts.CloudProvider)
		}
		log.Info("Warning: the provider reports no cluster ID; a cluster ID will be required in the future, tag your cluster", "provider", opts.CloudProvider)
	}
	if err := checkPlatforms(provider, opts); err != nil {
		return nil, err
	}
	restConfig, err := restConfig(opts)
	if err != nil {
		return nil, err
	}

	readyz := map[string]healthz.Checker{"ping": healthz.Ping}
	mo, servingRunnables, err := managerOptions(opts, readyz)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(restConfig, mo)
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	for _, r := range servingRunnables {
		if err := mgr.Add(r); err != nil {
			return nil, err
		}
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
	if p, ok := provider.(interface{ Ready(context.Context) error }); ok {
		readyz["provider"] = func(req *http.Request) error {
			ctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
			defer cancel()
			return p.Ready(ctx)
		}
	}
	if err := addConsole(mgr, restConfig, opts, provider); err != nil {
		return nil, err
	}
	init := newProviderInit(provider, restConfig, opts)
	if err := mgr.Add(init); err != nil {
		return nil, err
	}
	layer := cloud.New(provider, opts.callLayer())
	// A provider hung on many objects makes this replica unready, naming
	// the method family: the work of other objects goes on meanwhile.
	readyz["cloud-calls"] = func(*http.Request) error {
		if d := layer.Degraded(); len(d) > 0 {
			return fmt.Errorf("provider calls abandoned at their deadline and not returned, by method family: %v", d)
		}
		return nil
	}
	ids, err := newIdentities(mgr, restConfig, opts)
	if err != nil {
		return nil, err
	}
	migrated := &deferringManager{Manager: mgr}
	for _, name := range enabled {
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
		if skip := skipController(name, layer, opts); skip != "" {
			log.Info("Not running controller", "controller", name, "reason", skip)
			continue
		}
		target, err = ids.forController(target, name)
		if err != nil {
			return nil, err
		}
		if err := setupController(afterInit{Manager: target, done: init.done}, name, layer, opts); err != nil {
			return nil, err
		}
		log.Info("Enabled controller", "controller", name, "lease", lease)
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
	return mgr, nil
}

// skipController says why a controller does not run, or "". As upstream, a
// controller whose feature is off or whose provider interface is missing is
// skipped with a log line, not an error: a provider with only load
// balancers runs with the default --controllers.
func skipController(name string, layer *cloud.Layer, opts *Options) string {
	switch name {
	case node.Name, nodelifecycle.Name:
		if _, ok := layer.Instances(); !ok {
			return fmt.Sprintf("provider %q supports neither InstancesV2 nor Instances", opts.CloudProvider)
		}
	case service.Name:
		if _, ok := layer.LoadBalancer(); !ok {
			return fmt.Sprintf("provider %q has no load balancers", opts.CloudProvider)
		}
	case nodeipam.Name:
		if !opts.AllocateNodeCIDRs {
			return "--allocate-node-cidrs is false"
		}
	case route.Name:
		switch _, ok := layer.Routes(); {
		case !opts.ConfigureCloudRoutes:
			return "--configure-cloud-routes is false"
		case !ok:
			return fmt.Sprintf("--configure-cloud-routes is set, but provider %q has no routes", opts.CloudProvider)
		case opts.ClusterCIDR == "":
			return "--configure-cloud-routes needs --cluster-cidr"
		}
	}
	return ""
}

// checkPlatforms refuses --cloud-provider-platforms naming a scheme the
// provider says it does not serve (provider.Platforms).
func checkPlatforms(p cloudprovider.Interface, opts *Options) error {
	served, ok := p.(contract.Platforms)
	if !ok {
		return nil
	}
	for _, scheme := range opts.CloudProviderPlatforms {
		if !slices.Contains(served.Platforms(), scheme) {
			return fmt.Errorf("--cloud-provider-platforms names %q, but provider %q serves only the providerID schemes %v", scheme, opts.CloudProvider, served.Platforms())
		}
	}
	return nil
}

// setupController adds one controller to mgr.
func setupController(mgr manager.Manager, name string, layer *cloud.Layer, opts *Options) error {
	platforms, _ := platform.Parse(opts.CloudProviderPlatforms) // validated
	switch name {
	case node.Name:
		instances, _ := layer.Instances()
		return node.Setup(mgr, node.Options{
			Instances:      instances,
			Workers:        opts.NodeWorkers(),
			RefreshPeriod:  opts.NodeStatusUpdateFrequency,
			Platforms:      platforms,
			ProviderIDWait: opts.ProviderIDWait,
		})
	case nodelifecycle.Name:
		instances, _ := layer.Instances()
		return nodelifecycle.Setup(mgr, nodelifecycle.Options{
			Instances:     instances,
			MonitorPeriod: opts.NodeMonitorPeriod,
			Workers:       opts.LifecycleWorkers(),
			Platforms:     platforms,
		})
	case service.Name:
		lb, _ := layer.LoadBalancer()
		return service.Setup(mgr, service.Options{
			LoadBalancer:      lb,
			ClusterName:       opts.ClusterName,
			Class:             opts.LoadBalancerClass,
			Workers:           opts.ServiceWorkers(),
			Platforms:         platforms,
			OrphanSweepPeriod: opts.OrphanSweepPeriod,
		})
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
			Platforms:    platforms,
		})
	case route.Name:
		routes, _ := layer.Routes()
		cidrs, _ := nodeipam.ParseClusterCIDRs(opts.ClusterCIDR)
		return route.Setup(mgr, route.Options{
			Routes:       routes,
			ClusterName:  opts.ClusterName,
			ClusterCIDRs: cidrs,
			Period:       opts.RouteReconciliationPeriod,
			Workers:      opts.NodeWorkers(),
			Platforms:    platforms,
		})
	}
	return fmt.Errorf("controller %s has no setup", name)
}

func buildProvider(opts *Options, reg *providers.Registry) (cloudprovider.Interface, error) {
	var config io.Reader
	if opts.CloudConfig != "" {
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
	if opts.Kubeconfig == "" && opts.Master == "" {
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

// managerOptions maps the flags onto controller-runtime's manager. readyz
// may gain checks until the manager starts.
func managerOptions(opts *Options, readyz map[string]healthz.Checker) (manager.Options, []manager.Runnable, error) {
	metrics, runnables, err := opts.metricsServer(readyz)
	if err != nil {
		return manager.Options{}, nil, err
	}
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
		Metrics:                metrics,
	}, runnables, nil
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
