package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
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
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/go-logr/logr"

	"github.com/outrigger-ccm/outrigger/pkg/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/node"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/route"
	"github.com/outrigger-ccm/outrigger/pkg/controllers/service"
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
	restConfig, err := restConfig(opts)
	if err != nil {
		return nil, err
	}
	provider.Initialize(clientBuilder{restConfig}, ctx.Done())

	readyz := map[string]healthz.Checker{"ping": healthz.Ping}
	mgr, err := ctrl.NewManager(restConfig, managerOptions(opts, readyz))
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
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
	layer := cloud.New(provider, cloud.Options{QPS: opts.CloudQPS, Burst: opts.CloudBurst, Timeout: opts.CloudCallTimeout})
	log := klog.FromContext(ctx)
	migrated := &deferringManager{Manager: mgr}
	for _, name := range enabled {
		target := manager.Manager(mgr)
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
		skip, err := setupController(target, name, layer, opts)
		if err != nil {
			return nil, err
		}
		if skip != "" {
			log.Info("Not running controller", "controller", name, "reason", skip)
			continue
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

// setupController adds one controller to mgr, or says why it does not run
// (as upstream, a controller whose feature is off or whose provider interface
// is missing is skipped, not an error).
func setupController(mgr manager.Manager, name string, layer *cloud.Layer, opts *Options) (skip string, err error) {
	switch name {
	case node.Name, nodelifecycle.Name:
		instances, ok := layer.Instances()
		if !ok {
			return "", fmt.Errorf("controller %s needs InstancesV2, which provider %q does not offer; disable it with --controllers=*,-%s", name, opts.CloudProvider, name)
		}
		if name == node.Name {
			return "", node.Setup(mgr, node.Options{
				Instances:     instances,
				Workers:       opts.ConcurrentNodeSyncs,
				RefreshPeriod: opts.NodeStatusUpdateFrequency,
			})
		}
		return "", nodelifecycle.Setup(mgr, nodelifecycle.Options{
			Instances:     instances,
			MonitorPeriod: opts.NodeMonitorPeriod,
			Workers:       opts.ConcurrentNodeSyncs,
		})
	case service.Name:
		lb, ok := layer.LoadBalancer()
		if !ok {
			return fmt.Sprintf("provider %q has no load balancers", opts.CloudProvider), nil
		}
		return "", service.Setup(mgr, service.Options{
			LoadBalancer: lb,
			ClusterName:  opts.ClusterName,
			Class:        opts.LoadBalancerClass,
			Workers:      opts.ConcurrentServiceSyncs,
		})
	case nodeipam.Name:
		if !opts.AllocateNodeCIDRs {
			return "--allocate-node-cidrs is false", nil
		}
		cidrs, _ := nodeipam.ParseClusterCIDRs(opts.ClusterCIDR)
		src, _ := layer.NodeCIDRs()
		return "", nodeipam.Setup(mgr, nodeipam.Options{
			Type:         opts.CIDRAllocatorType,
			ClusterCIDRs: cidrs,
			MaskV4:       opts.NodeCIDRMaskSizeIPv4,
			MaskV6:       opts.NodeCIDRMaskSizeIPv6,
			Cloud:        src,
			Workers:      opts.ConcurrentNodeSyncs,
		})
	case route.Name:
		if !opts.AllocateNodeCIDRs || !opts.ConfigureCloudRoutes {
			return "needs --allocate-node-cidrs and --configure-cloud-routes", nil
		}
		routes, ok := layer.Routes()
		if !ok {
			return fmt.Sprintf("provider %q has no routes", opts.CloudProvider), nil
		}
		cidrs, _ := nodeipam.ParseClusterCIDRs(opts.ClusterCIDR)
		return "", route.Setup(mgr, route.Options{
			Routes:       routes,
			ClusterName:  opts.ClusterName,
			ClusterCIDRs: cidrs,
			Period:       opts.RouteReconciliationPeriod,
			Workers:      opts.ConcurrentNodeSyncs,
		})
	}
	return "", fmt.Errorf("controller %s has no setup", name)
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
	cfg.QPS = opts.KubeAPIQPS
	cfg.Burst = opts.KubeAPIBurst
	cfg.UserAgent = "outrigger"
	return cfg, nil
}

// managerOptions maps the flags onto controller-runtime's manager. readyz
// may gain checks until the manager starts.
func managerOptions(opts *Options, readyz map[string]healthz.Checker) manager.Options {
	mo := manager.Options{
		LeaderElection:                opts.LeaderElect,
		LeaderElectionID:              opts.LeaderElectResourceName,
		LeaderElectionNamespace:       opts.LeaderElectResourceNamespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(opts.LeaderElectLeaseDuration),
		RenewDeadline:                 ptr.To(opts.LeaderElectRenewDeadline),
		RetryPeriod:                   ptr.To(opts.LeaderElectRetryPeriod),
		// Controllers are named as upstream's; several managers in one
		// process (tests, `outrigger dev`) reuse the names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// No controller reads managedFields; dropping them from the cache
		// is a good part of its memory at thousands of nodes.
		Cache:                  cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		HealthProbeBindAddress: "0",
		Metrics:                metricsserver.Options{BindAddress: "0"},
	}
	if opts.SecurePort > 0 {
		mo.Metrics = metricsserver.Options{
			BindAddress:   net.JoinHostPort(opts.BindAddress, strconv.Itoa(opts.SecurePort)),
			SecureServing: true,
			ExtraHandlers: map[string]http.Handler{},
		}
		live := &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}
		for path, h := range map[string]http.Handler{"/healthz": live, "/livez": live, "/readyz": &healthz.Handler{Checks: readyz}} {
			// As controller-runtime's probe server mounts them: the
			// handler reads the path below its prefix as a check name.
			mo.Metrics.ExtraHandlers[path] = http.StripPrefix(path, h)
			mo.Metrics.ExtraHandlers[path+"/"] = http.StripPrefix(path, h)
		}
		if !opts.DisableMetricsAuthentication {
			mo.Metrics.FilterProvider = healthUnauthenticated(filters.WithAuthenticationAndAuthorization)
		}
	}
	return mo
}

// healthUnauthenticated applies filter to every path but the health checks,
// which kubelet probes without credentials, as on upstream's secure port.
func healthUnauthenticated(filter func(*rest.Config, *http.Client) (metricsserver.Filter, error)) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(c *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		inner, err := filter(c, hc)
		if err != nil {
			return nil, err
		}
		return func(log logr.Logger, h http.Handler) (http.Handler, error) {
			protected, err := inner(log, h)
			if err != nil {
				return nil, err
			}
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if isHealthPath(r.URL.Path) {
					h.ServeHTTP(w, r)
					return
				}
				protected.ServeHTTP(w, r)
			}), nil
		}, nil
	}
}

func isHealthPath(p string) bool {
	for _, prefix := range []string{"/healthz", "/livez", "/readyz"} {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
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
