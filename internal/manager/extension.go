package manager

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	cmconfig "k8s.io/controller-manager/config"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Extension is what a provider's own main adds to Outrigger beside its
// provider: its own controllers, the identities of Outrigger's, the client
// builder its provider is initialized with. Package app fills it from
// upstream's k8s.io/cloud-provider/app arguments; Options.Extension carries
// it. With an Extension, a provider without a cluster ID runs, as under
// upstream's app.Run: refusing is the cloud initializer's choice.
type Extension struct {
	// Builtin names Outrigger's controllers this binary offers; nil offers
	// all. A provider's main that leaves one out of its controller map
	// does not run it, as upstream.
	Builtin []string
	// Controllers are the provider's own, enabled by --controllers as
	// Outrigger's are.
	Controllers []Controller
	// DisabledByDefault are the controllers, Outrigger's or the
	// provider's, that '*' leaves out: they run only when --controllers
	// names them (upstream's ControllersDisabledByDefault).
	DisabledByDefault []string
	// Webhooks are the provider's webhooks by name, which --webhooks
	// accepts; with any, the webhook port's flags are in use.
	Webhooks []string
	// Aliases are more names --controllers accepts, alias to canonical.
	Aliases map[string]string
	// ClientNames are the ServiceAccounts Outrigger's controllers act as
	// with --use-service-account-credentials, by controller, where they
	// differ from upstream's.
	ClientNames map[string]string
	// ClientBuilder, when set, is what the provider's Initialize gets.
	ClientBuilder cloudprovider.ControllerClientBuilder
	// Prepare runs once the manager exists and before the provider is
	// built: informers is the client-go factory over the manager's cache.
	Prepare func(mgr manager.Manager, informers informers.SharedInformerFactory) error
	// Started runs once every enabled provider controller of a lease has
	// started: once for those of the main lease, again for those of the
	// migration lease when it is taken.
	Started func(ctx context.Context)
	// RestConfig, when set, is the API server's configuration, used as
	// given instead of --kubeconfig and --master (app.Run hands the
	// CompletedConfig's Kubeconfig).
	RestConfig *rest.Config
	// HealthCheck, when set, is told of every controller's health check
	// as it joins /healthz, for a main that serves health itself (app.Run
	// serves upstream's on the CompletedConfig's SecureServing).
	HealthCheck func(name string, check healthz.Checker)
	// LeaderMigration, when set, is the leader migration configuration
	// already read (upstream's CompletedConfig holds it parsed), used
	// instead of --leader-migration-config's file.
	LeaderMigration *cmconfig.LeaderMigrationConfiguration
	// SecureListener, when set, is the secure port already bound by
	// upstream's options (the CompletedConfig's SecureServing): Outrigger
	// serves its port there instead of binding --secure-port again.
	SecureListener net.Listener
}

// Controller is a provider's own controller.
type Controller struct {
	Name string
	// Start starts the controller, which runs until ctx ends; false means
	// it chose not to run. check, when not nil, is its health check,
	// served as /healthz/<Name> (a started controller without one gets a
	// ping there, as upstream).
	Start func(ctx context.Context) (check healthz.Checker, started bool, err error)
}

// builtin is the Outrigger controllers this binary offers.
func (o *Options) builtin() []string {
	if o.Extension == nil || o.Extension.Builtin == nil {
		return shippedControllers
	}
	var out []string
	for _, name := range shippedControllers {
		if slices.Contains(o.Extension.Builtin, name) {
			out = append(out, name)
		}
	}
	return out
}

// extraControllers are the provider's own controllers.
func (o *Options) extraControllers() []Controller {
	if o.Extension == nil {
		return nil
	}
	return o.Extension.Controllers
}

// ReasonControllerFailed is the Event reason of a provider controller
// that failed to start.
const ReasonControllerFailed = "ControllerFailed"

// providerControllers starts the provider's own controllers once this
// replica leads and the provider is initialized. One that fails or panics
// stops the process, as upstream's does, after saying which in the log
// and in a Warning Event on the leader-election Lease.
type providerControllers struct {
	controllers []Controller
	started     func(context.Context)
	health      *healthChecks
	recorder    record.EventRecorder
	lease       *corev1.ObjectReference
}

func (p *providerControllers) NeedLeaderElection() bool { return true }

func (p *providerControllers) Start(ctx context.Context) error {
	log := klog.FromContext(ctx)
	for _, c := range p.controllers {
		check, started, err := startOne(ctx, c)
		switch {
		case err != nil:
			log.Error(err, "Provider controller failed to start", "controller", c.Name)
			p.recorder.Eventf(p.lease, corev1.EventTypeWarning, ReasonControllerFailed, "Provider controller %s failed to start: %v", c.Name, err)
			return fmt.Errorf("provider controller %s failed to start: %w", c.Name, err)
		case !started:
			log.Info("Provider controller chose not to run", "controller", c.Name)
		default:
			if check == nil {
				check = healthz.Ping
			}
			p.health.add(c.Name, check)
			log.Info("Started provider controller", "controller", c.Name)
		}
	}
	if p.started != nil {
		p.started(ctx)
	}
	<-ctx.Done()
	return nil
}

// startOne runs c.Start, turning a panic into an error.
func startOne(ctx context.Context, c Controller) (check healthz.Checker, started bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return c.Start(ctx)
}
