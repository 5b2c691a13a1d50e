package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/util/wait"
	apiserverhealthz "k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	configv1alpha1 "k8s.io/cloud-provider/config/v1alpha1"
	"k8s.io/component-base/configz"
	genericcontrollermanager "k8s.io/controller-manager/app"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Run is upstream's: it runs Outrigger's manager from c alone, as a main
// that builds its own command (vSphere's) calls it, and returns nil once
// stopCh closes. What the main's options already made of its flags is
// what runs: c.Kubeconfig is the API server's configuration, leader
// election, leader migration and the controllers enabled are
// c.ComponentConfig's, and the listeners c.SecureServing and
// c.WebhookSecureServing hold, already bound, serve upstream's handlers
// (/healthz with a check per controller, /metrics, /configz; the webhooks
// when the CloudControllerManagerWebhook gate is on). Outrigger's own
// flags keep their defaults.
//
// A key of controllerInitializers whose InitFunc came from one of the
// Start*ControllerWrapper functions (through ConstructControllerInitializers)
// runs Outrigger's controller of that name; every other key runs the
// InitFunc under Outrigger's leader election, after cloud's Initialize.
func Run(c *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface, controllerInitializers map[string]InitFunc, webhooks map[string]WebhookHandler, stopCh <-chan struct{}) error {
	ctx := wait.ContextForChannel(stopCh)
	if cloud == nil {
		return errors.New("the provider's cloud is nil")
	}
	opts := optionsFrom(c)
	x := &extras{config: c, initFuncs: map[string]InitFunc{}}
	ext := &manager.Extension{
		Builtin:           []string{},
		ClientNames:       map[string]string{},
		DisabledByDefault: ControllersDisabledByDefault.List(),
		ClientBuilder:     c.ClientBuilder,
		RestConfig:        c.Kubeconfig,
		Started:           x.started,
	}
	if c.ComponentConfig.Generic.LeaderMigrationEnabled {
		ext.LeaderMigration = &c.ComponentConfig.Generic.LeaderMigration
	}
	for _, name := range sortedKeys(controllerInitializers) {
		init := controllerInitializers[name]
		if isRunsInManager(init) {
			ext.Builtin = append(ext.Builtin, name)
			if d, ok := DefaultInitFuncConstructors[name]; ok {
				ext.ClientNames[name] = d.InitContext.ClientName
			}
			continue
		}
		x.initFuncs[name] = init
		ext.Controllers = append(ext.Controllers, manager.Controller{
			Name:  name,
			Start: func(ctx context.Context) (healthz.Checker, bool, error) { return x.start(ctx, name) },
		})
	}
	opts.Extension = ext

	klog.FromContext(ctx).Info("Starting Outrigger from the provider's configuration", "cloudProvider", opts.CloudProvider,
		"controllers", opts.Controllers, "leaderElect", opts.LeaderElect)
	if c.EventBroadcaster != nil {
		c.EventBroadcaster.StartStructuredLogging(0)
		c.EventBroadcaster.StartRecordingToSink(&v1core.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
		defer c.EventBroadcaster.Shutdown()
	}

	// /configz, as upstream's: the component config in its v1alpha1 form.
	external := &configv1alpha1.CloudControllerManagerConfiguration{}
	if err := configv1alpha1.Convert_config_CloudControllerManagerConfiguration_To_v1alpha1_CloudControllerManagerConfiguration(&c.ComponentConfig, external, nil); err != nil {
		return fmt.Errorf("unable to convert configz: %w", err)
	}
	external.SetGroupVersionKind(configv1alpha1.SchemeGroupVersion.WithKind("CloudControllerManagerConfiguration"))
	cz, err := configz.New(ConfigzName)
	if err != nil {
		return fmt.Errorf("unable to register configz: %w", err)
	}
	defer configz.Delete(ConfigzName)
	if err := cz.Set(external); err != nil {
		return fmt.Errorf("unable to set configz: %w", err)
	}

	// Upstream's secure port, on the listener the main's options bound.
	health := controllerhealthz.NewMutableHealthzHandler(apiserverhealthz.PingHealthz)
	ext.HealthCheck = func(name string, check healthz.Checker) {
		health.AddHealthChecker(apiserverhealthz.NamedCheck(name, func(r *http.Request) error { return check(r) }))
	}
	if c.SecureServing != nil {
		mux := genericcontrollermanager.NewBaseHandler(&c.ComponentConfig.Generic.Debugging, health)
		handler := genericcontrollermanager.BuildHandlerChain(mux, &c.Authorization, &c.Authentication)
		if _, _, err := c.SecureServing.Serve(handler, 0, stopCh); err != nil {
			return fmt.Errorf("secure port: %w", err)
		}
	}
	// Served by every replica, leader or not, as upstream's.
	if err := serveWebhooks(ctx, c, webhooks); err != nil {
		return err
	}

	reg := provider.NewRegistry()
	reg.Register(opts.CloudProvider, func(io.Reader) (cloudprovider.Interface, error) { return cloud, nil })
	// Informers the cloud initializer took from c start with the provider's
	// controllers, as upstream starts them; the controllers themselves get
	// Outrigger's shared cache.
	own := c.SharedInformers
	ext.Prepare = func(_ ctrlmanager.Manager, shared informers.SharedInformerFactory) error {
		x.shared = shared
		return nil
	}
	if own != nil {
		started := ext.Started
		ext.Started = func(ctx context.Context) {
			started(ctx)
			own.Start(ctx.Done())
		}
	}
	if err := manager.Run(ctx, opts, reg); err != nil {
		return err
	}
	return nil
}

// isRunsInManager reports whether f is the InitFunc of one of upstream's
// four controllers, which Outrigger's manager runs.
func isRunsInManager(f InitFunc) bool {
	return f != nil && reflect.ValueOf(f).Pointer() == reflect.ValueOf(InitFunc(runsInManager)).Pointer()
}

func sortedKeys(m map[string]InitFunc) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// optionsFrom are Outrigger's options holding what c holds; the rest keep
// Outrigger's defaults. Outrigger's own secure port is off: c's serves.
func optionsFrom(c *cloudcontrollerconfig.CompletedConfig) *manager.Options {
	cc := c.ComponentConfig
	o := manager.NewOptions()
	o.CloudProvider = cc.KubeCloudShared.CloudProvider.Name
	o.CloudConfig = cc.KubeCloudShared.CloudProvider.CloudConfigFile
	o.AllowUntaggedCloud = cc.KubeCloudShared.AllowUntaggedCloud
	o.ExternalCloudVolumePlugin = cc.KubeCloudShared.ExternalCloudVolumePlugin
	o.UseServiceAccountCredentials = cc.KubeCloudShared.UseServiceAccountCredentials
	o.ClusterName = cc.KubeCloudShared.ClusterName
	o.ClusterCIDR = cc.KubeCloudShared.ClusterCIDR
	o.AllocateNodeCIDRs = cc.KubeCloudShared.AllocateNodeCIDRs
	o.CIDRAllocatorType = cc.KubeCloudShared.CIDRAllocatorType
	o.ConfigureCloudRoutes = cc.KubeCloudShared.ConfigureCloudRoutes
	if d := cc.KubeCloudShared.RouteReconciliationPeriod.Duration; d > 0 {
		o.RouteReconciliationPeriod = d
	}
	if d := cc.NodeLifecycleController.NodeMonitorPeriod.Duration; d > 0 {
		o.NodeMonitorPeriod = d
	}
	if d := cc.KubeCloudShared.NodeSyncPeriod.Duration; d > 0 {
		o.NodeSyncPeriod = d
	}
	if d := cc.NodeStatusUpdateFrequency.Duration; d > 0 {
		o.NodeStatusUpdateFrequency = d
	}
	if n := cc.NodeController.ConcurrentNodeSyncs; n > 0 {
		o.ConcurrentNodeSyncs = n
	}
	if n := cc.NodeController.ConcurrentNodeStatusUpdates; n > 0 {
		o.ConcurrentNodeStatusUpdates = n
	}
	if n := cc.ServiceController.ConcurrentServiceSyncs; n > 0 {
		o.ConcurrentServiceSyncs = n
	}
	g := cc.Generic
	if len(g.Controllers) > 0 {
		o.Controllers = g.Controllers
	}
	if d := g.MinResyncPeriod.Duration; d > 0 {
		o.MinResyncPeriod = d
	}
	if d := g.ControllerStartInterval.Duration; d > 0 {
		o.ControllerStartInterval = d
	}
	o.Profiling = g.Debugging.EnableProfiling
	o.ContentionProfiling = g.Debugging.EnableContentionProfiling
	le := g.LeaderElection
	o.LeaderElect = le.LeaderElect
	if le.LeaderElect {
		o.LeaderElectLeaseDuration = le.LeaseDuration.Duration
		o.LeaderElectRenewDeadline = le.RenewDeadline.Duration
		o.LeaderElectRetryPeriod = le.RetryPeriod.Duration
		o.LeaderElectResourceLock = le.ResourceLock
		o.LeaderElectResourceName = le.ResourceName
		o.LeaderElectResourceNamespace = le.ResourceNamespace
	}
	o.EnableLeaderMigration = g.LeaderMigrationEnabled
	o.Serving.BindPort = 0
	return o
}
