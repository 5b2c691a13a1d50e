// Package app runs a provider's own main.go, written against upstream's
// k8s.io/cloud-provider/app, on Outrigger: the main changes only that import
// path. Its exported API is what providers use of upstream's package, with
// upstream's own types wherever provider code passes them on (a controller
// package that imports upstream's app types, as AWS's tagging controller
// does, compiles unchanged).
//
// Behind NewCloudControllerManagerCommand runs Outrigger: its flags (every
// upstream flag and Outrigger's own, with the provider's additional flags
// after them), its secure port, leader election and controllers. The keys
// of DefaultInitFuncConstructors run Outrigger's controllers; every other
// key runs the provider's InitFunc under Outrigger's leader election once
// the provider is initialized, enabled by --controllers as upstream. The
// cloud initializer gets upstream's *config.CompletedConfig built from the
// flags, whose SharedInformers are Outrigger's own cache.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cacheddiscovery "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/restmapper"
	cloudprovider "k8s.io/cloud-provider"
	upstream "k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/controller-manager/pkg/clientbuilder"
	cmfeatures "k8s.io/controller-manager/pkg/features"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Upstream's types, so that what a provider builds with them passes
// through unchanged.
type (
	ControllerInitFuncConstructor = upstream.ControllerInitFuncConstructor
	ControllerInitContext         = upstream.ControllerInitContext
	InitFunc                      = upstream.InitFunc
	InitFuncConstructor           = upstream.InitFuncConstructor
	InitCloudFunc                 = upstream.InitCloudFunc
)

// ConfigzName is upstream's /configz section name.
const ConfigzName = upstream.ConfigzName

var (
	// ControllersDisabledByDefault are controllers '*' leaves out: they run
	// only when --controllers names them. A provider inserts its own.
	ControllersDisabledByDefault = sets.NewString()

	// AllWebhooks and DisabledByDefaultWebhooks are empty, as upstream's:
	// no webhooks are served.
	AllWebhooks               = []string{}
	DisabledByDefaultWebhooks = []string{}
)

// DefaultInitFuncConstructors are Outrigger's controllers by upstream's
// names, the four upstream's map holds (node IPAM is not among them, as
// upstream: a provider that allocates pod CIDRs brings its own, as GCP's
// and Linode's do; Outrigger's own binary runs its node IPAM), with
// upstream's client names (the ServiceAccounts they act as
// with --use-service-account-credentials). A provider may change a
// ClientName, leave a controller out, or replace one with its own
// constructor, which then runs instead of Outrigger's.
var DefaultInitFuncConstructors = defaultConstructors()

// defaultConstructors are the controllers internal/manager lists as
// upstream's, each with its ServiceAccount as ClientName and upstream's
// wrapper of that name.
func defaultConstructors() map[string]ControllerInitFuncConstructor {
	out := map[string]ControllerInitFuncConstructor{}
	for _, d := range manager.Controllers() {
		if d.Upstream {
			out[d.Name] = ControllerInitFuncConstructor{InitContext: ControllerInitContext{ClientName: d.ServiceAccount}, Constructor: upstreamWrappers[d.Name]}
		}
	}
	return out
}

// upstreamWrappers are upstream's exported wrappers of its four
// controllers, by upstream's names (which are Outrigger's controllers'):
// part of the API a provider's main names, not a list of Outrigger's
// controllers, which a controller of Outrigger's own never joins.
var upstreamWrappers = map[string]InitFuncConstructor{
	names.CloudNodeController:          StartCloudNodeControllerWrapper,
	names.CloudNodeLifecycleController: StartCloudNodeLifecycleControllerWrapper,
	names.ServiceLBController:          StartServiceControllerWrapper,
	names.NodeRouteController:          StartRouteControllerWrapper,
}

// isOutriggers reports whether c is one of upstream's four controllers,
// which Outrigger's manager runs: its InitFunc is never called.
func isOutriggers(c ControllerInitFuncConstructor) bool {
	if c.Constructor == nil {
		return false
	}
	p := reflect.ValueOf(c.Constructor).Pointer()
	for _, w := range upstreamWrappers {
		if reflect.ValueOf(w).Pointer() == p {
			return true
		}
	}
	return false
}

// ControllerNames are the names of the constructors, sorted.
func ControllerNames(constructors map[string]ControllerInitFuncConstructor) []string {
	return sets.StringKeySet(constructors).List()
}

// NewCloudControllerManagerCommand is upstream's, running Outrigger. s
// holds the provider's defaults (any it changed from upstream's are
// Outrigger's defaults too) and, once the command runs, the values of the
// flags. additionalFlags follow Outrigger's flags in --help; one that
// Outrigger also defines is one flag (the provider's default wins until the
// user gives it), and one of another type stops the command with a
// one-line error. The command runs until stopCh closes, SIGINT or SIGTERM.
func NewCloudControllerManagerCommand(s *options.CloudControllerManagerOptions, cloudInitializer InitCloudFunc, controllerInitFuncConstructors map[string]ControllerInitFuncConstructor, controllerAliases map[string]string, additionalFlags cliflag.NamedFlagSets, stopCh <-chan struct{}) *cobra.Command {
	return newCommand(&binary{
		s: s, cloudInitializer: cloudInitializer,
		constructors: controllerInitFuncConstructors, aliases: controllerAliases, stop: stopCh,
	}, "cloud-controller-manager", "The cloud controller manager runs the cloud specific control loops, on Outrigger.", additionalFlags)
}

// newCommand is the command of b, a provider's main.
func newCommand(b *binary, use, long string, additionalFlags cliflag.NamedFlagSets) *cobra.Command {
	opts := manager.NewOptions()
	b.opts = opts
	s := b.s
	allWebhooks, webhooksOff := AllWebhooks, DisabledByDefaultWebhooks
	if b.webhooks != nil {
		allWebhooks, webhooksOff = WebhookNames(b.webhooks), WebhooksDisabledByDefault.List()
	}
	b.upstreamFlags = s.Flags(ControllerNames(b.constructors), ControllersDisabledByDefault.List(), b.aliases, allWebhooks, webhooksOff)
	extra, dups := b.splitFlags(additionalFlags)
	cmd := manager.NewCustomCommand(opts, manager.CommandText{Use: use, Long: long, Yield: true}, extra, b.run)
	b.flags = cmd.Flags()
	b.dups = dups
	// The provider's own defaults, from s, where they differ from upstream's.
	if err := b.seedDefaults(); err != nil {
		b.conflict = err
	}
	b.extend()
	// Bad flags stop the command before anything starts (logging
	// included, which can be set up once per process).
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if b.conflict != nil {
			return b.conflict
		}
		if err := opts.TakeYielded(); err != nil {
			return err
		}
		// Read as the command starts, as upstream reads it: a main may
		// add to it after building the command.
		opts.Extension.DisabledByDefault = ControllersDisabledByDefault.List()
		if b.webhooks != nil {
			opts.Extension.Webhooks = WebhookNames(b.webhooks)
		}
		if cmd.Flags().Changed("version") {
			return nil
		}
		return opts.Validate()
	}
	printOnce(cmd)
	return cmd
}

// printOnce makes the command print its error to its stderr, once,
// whatever the main does with it: upstream's command prints it (cobra
// does), and mains written for it exit 1 without a word (GCP's, hcloud's)
// or print it again themselves (Linode's). Cobra's own printing stays
// off, even where a main turned it back on, so it is never twice.
func printOnce(cmd *cobra.Command) {
	report := func(c *cobra.Command, err error) error {
		if err != nil {
			c.SilenceErrors = true
			cmd.SilenceErrors = true
			fmt.Fprintf(c.ErrOrStderr(), "Error: %v\n", err)
		}
		return err
	}
	flagErr := cmd.FlagErrorFunc()
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return report(c, flagErr(c, err)) })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error { return report(c, args(c, a)) }
	}
	for _, f := range []*func(*cobra.Command, []string) error{&cmd.PreRunE, &cmd.RunE} {
		if run := *f; run != nil {
			*f = func(c *cobra.Command, a []string) error { return report(c, run(c, a)) }
		}
	}
}

// extend tells Outrigger's manager what the provider's main adds: which of
// Outrigger's controllers it keeps and under which client names, and its
// own controllers, started through x.
func (b *binary) extend() {
	b.x = &extras{}
	ext := &manager.Extension{
		Builtin:     []string{},
		Aliases:     b.aliases,
		ClientNames: map[string]string{},
		Started:     b.x.started,
	}
	for _, name := range ControllerNames(b.constructors) {
		con := b.constructors[name]
		if isOutriggers(con) {
			ext.Builtin = append(ext.Builtin, name)
			ext.ClientNames[name] = con.InitContext.ClientName
			continue
		}
		ext.Controllers = append(ext.Controllers, manager.Controller{
			Name:  name,
			Start: func(ctx context.Context) (healthz.Checker, bool, error) { return b.x.start(ctx, name) },
		})
	}
	b.opts.Extension = ext
}

// binary is one provider main's command.
type binary struct {
	s                *options.CloudControllerManagerOptions
	opts             *manager.Options
	cloudInitializer InitCloudFunc
	constructors     map[string]ControllerInitFuncConstructor
	aliases          map[string]string
	stop             <-chan struct{}

	// upstreamFlags are upstream's flags bound to s, not on the command.
	upstreamFlags cliflag.NamedFlagSets
	// flags are the command's: Outrigger's and the provider's additional.
	flags *pflag.FlagSet
	// dups are additional flags Outrigger also defines: the provider's
	// flag, not on the command, by name.
	dups map[string]*pflag.Flag
	// conflict stops the command at start.
	conflict error
	// x starts the provider's own controllers.
	x *extras
	// webhooks are the provider's (CommandBuilder.RegisterWebhook),
	// served on the webhook port; nil for NewCloudControllerManagerCommand,
	// which serves none, as upstream's.
	webhooks map[string]WebhookConfig
}

// splitFlags returns the additional flags for the command, by section,
// and those that name one of upstream's flags. A flag named as one of
// Outrigger's own (manager.OwnFlag) goes on the command and replaces
// Outrigger's, as one added to command.Flags() later does.
func (b *binary) splitFlags(additional cliflag.NamedFlagSets) (cliflag.NamedFlagSets, map[string]*pflag.Flag) {
	ours := pflag.NewFlagSet("", pflag.ContinueOnError)
	manager.NewOptions().AddFlags(ours)
	var extra cliflag.NamedFlagSets
	dups := map[string]*pflag.Flag{}
	for _, name := range additional.Order {
		additional.FlagSet(name).VisitAll(func(f *pflag.Flag) {
			if ours.Lookup(f.Name) != nil && !manager.OwnFlag(f.Name) {
				dups[f.Name] = f
				return
			}
			extra.FlagSet(name).AddFlag(f)
		})
	}
	return extra, dups
}

// seedDefaults makes the provider's defaults Outrigger's: the values s
// held when the command was made, where they differ from upstream's, and
// the additional flags Outrigger also defines.
func (b *binary) seedDefaults() error {
	pristine, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		return err
	}
	def := pristine.Flags(ControllerNames(b.constructors), ControllersDisabledByDefault.List(), b.aliases, AllWebhooks, DisabledByDefaultWebhooks)
	var errs []error
	for _, fs := range b.upstreamFlags.FlagSets {
		fs.VisitAll(func(theirs *pflag.Flag) {
			ours := b.flags.Lookup(theirs.Name)
			up := lookup(def, theirs.Name)
			if ours == nil || up == nil || theirs.DefValue == up.DefValue {
				return
			}
			if err := copyFlag(ours, theirs); err != nil {
				errs = append(errs, fmt.Errorf("the provider's default of --%s: %w", theirs.Name, err))
			}
			ours.DefValue = ours.Value.String()
		})
	}
	for name, theirs := range b.dups {
		ours := b.flags.Lookup(name)
		if ours.Value.Type() != theirs.Value.Type() {
			// As upstream's command, which adds a provider's flag only
			// under a name still free: upstream's flag is the one parsed,
			// and the provider's keeps its default.
			delete(b.dups, name)
			continue
		}
		if err := copyFlag(ours, theirs); err != nil {
			errs = append(errs, fmt.Errorf("the provider's default of --%s: %w", name, err))
		}
		ours.DefValue = ours.Value.String()
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, however many: it is the command's whole output.
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func lookup(nfs cliflag.NamedFlagSets, name string) *pflag.Flag {
	for _, fs := range nfs.FlagSets {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// copyFlag sets dst to src's value.
func copyFlag(dst, src *pflag.Flag) error {
	if dst.Value.String() == src.Value.String() {
		return nil
	}
	if ds, ok := dst.Value.(pflag.SliceValue); ok {
		if ss, ok := src.Value.(pflag.SliceValue); ok {
			return ds.Replace(ss.GetSlice())
		}
	}
	return dst.Value.Set(src.Value.String())
}

// syncFlags hands the parsed values to the provider: to its additional
// flags Outrigger also defines, and to s (upstream's flags).
func (b *binary) syncFlags(log klog.Logger) error {
	for name, theirs := range b.dups {
		if err := copyFlag(theirs, b.flags.Lookup(name)); err != nil {
			return fmt.Errorf("flag --%s: the provider's flag does not take Outrigger's value: %w", name, err)
		}
	}
	for _, fs := range b.upstreamFlags.FlagSets {
		fs.VisitAll(func(theirs *pflag.Flag) {
			ours := b.flags.Lookup(theirs.Name)
			if ours == nil {
				return
			}
			// Outrigger's feature gates are its own; upstream's gate
			// keeps its defaults.
			if err := copyFlag(theirs, ours); err != nil {
				log.V(2).Info("Upstream's options do not take this flag's value; Outrigger's applies", "flag", "--"+theirs.Name, "err", err)
			}
		})
	}
	return nil
}

// run is the command once the flags are parsed and logging is set up.
func (b *binary) run(ctx context.Context) error {
	if b.conflict != nil {
		return b.conflict
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	log := klog.FromContext(ctx)
	if err := b.syncFlags(log); err != nil {
		return err
	}
	// Upstream's options bind the secure port, as upstream's Config does,
	// so that the CompletedConfig carries SecureServing, Authentication
	// and Authorization as upstream's: Outrigger's port serves on that
	// listener. The webhook port is upstream's, as its app.Run serves it,
	// when the provider has webhooks.
	if err := b.s.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return fmt.Errorf("the secure port's self-signed certificate: %w", err)
	}
	if len(b.webhooks) == 0 {
		b.s.WebhookServing = nil
	} else if err := b.s.WebhookServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		// A certificate of its own when none is given, as upstream's.
		return fmt.Errorf("the webhook port's self-signed certificate: %w", err)
	}
	c := &cloudcontrollerconfig.Config{}
	if err := b.s.ApplyTo(c, ControllerNames(b.constructors), ControllersDisabledByDefault.List(), b.aliases, options.CloudControllerManagerUserAgent); err != nil {
		return fmt.Errorf("the provider's configuration: %w", err)
	}
	completed := c.Complete()
	// Events the provider records through the config, as upstream.
	c.EventBroadcaster.StartRecordingToSink(&v1core.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	defer c.EventBroadcaster.Shutdown()

	var cloud cloudprovider.Interface
	reg := provider.NewRegistry()
	reg.Register(b.opts.CloudProvider, func(io.Reader) (cloudprovider.Interface, error) {
		if cloud == nil {
			return nil, errors.New("the provider's cloud initializer returned no provider")
		}
		return cloud, nil
	})
	x := b.x
	x.config = completed
	ext := b.opts.Extension
	ext.ClientBuilder = c.ClientBuilder
	if c.SecureServing != nil {
		ext.SecureListener = c.SecureServing.Listener
	}
	ext.Prepare = func(_ ctrlmanager.Manager, shared informers.SharedInformerFactory) error {
		c.SharedInformers = shared
		x.shared = shared
		cloud = b.cloudInitializer(completed)
		// As upstream: every constructor gets the initialized config and
		// cloud before any controller starts.
		x.initFuncs = map[string]InitFunc{}
		for _, name := range ControllerNames(b.constructors) {
			if con := b.constructors[name]; !isOutriggers(con) {
				x.initFuncs[name] = con.Constructor(con.InitContext, completed, cloud)
			}
		}
		return serveWebhooks(ctx, completed, NewWebhookHandlers(b.webhooks, completed, cloud))
	}
	return manager.Run(ctx, b.opts, reg)
}

// extras start the provider's own controllers with the controller context
// upstream gives them.
type extras struct {
	config    *cloudcontrollerconfig.CompletedConfig
	shared    informers.SharedInformerFactory
	initFuncs map[string]InitFunc

	once        sync.Once
	startedOnce sync.Once
	ctx         genericcontrollermanager.ControllerContext
	metadata    metadatainformer.SharedInformerFactory
	err         error
}

// start runs the controller's InitFunc; a controller that can report its
// health (controller.HealthCheckable) is checked under its name.
func (x *extras) start(ctx context.Context, name string) (healthz.Checker, bool, error) {
	x.once.Do(func() { x.err = x.build(ctx) })
	if x.err != nil {
		return nil, false, fmt.Errorf("controller context: %w", x.err)
	}
	ctrl, started, err := x.initFuncs[name](ctx, x.ctx)
	if err != nil || !started {
		return nil, started, err
	}
	if hc, ok := ctrl.(controller.HealthCheckable); ok {
		if check := hc.HealthChecker(); check != nil {
			return check.Check, true, nil
		}
	}
	return nil, true, nil
}

// build makes the controller context as upstream's CreateControllerContext
// does (its client builder holds the root credentials), except that the
// typed informers are the shared cache.
func (x *extras) build(ctx context.Context) error {
	root := clientbuilder.SimpleControllerClientBuilder{ClientConfig: x.config.Kubeconfig}
	mdClient, err := metadata.NewForConfig(root.ConfigOrDie("metadata-informers"))
	if err != nil {
		return err
	}
	resync := upstream.ResyncPeriod(x.config)
	x.metadata = metadatainformer.NewSharedInformerFactory(mdClient, resync())
	discovery, err := root.Client("controller-discovery")
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cacheddiscovery.NewMemCacheClient(discovery.Discovery()))
	go wait.UntilWithContext(ctx, func(context.Context) { mapper.Reset() }, 30*time.Second)
	x.ctx = genericcontrollermanager.ControllerContext{
		ClientBuilder:                   root,
		InformerFactory:                 x.shared,
		ObjectOrMetadataInformerFactory: informerfactory.NewInformerFactory(x.shared, x.metadata),
		RESTMapper:                      mapper,
		Stop:                            ctx.Done(),
		InformersStarted:                make(chan struct{}),
		ResyncPeriod:                    resync,
		ControllerManagerMetrics:        controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager"),
	}
	controllersmetrics.Register()
	return nil
}

// started runs once every provider controller has started: the informers
// they asked for start, as upstream starts its factories then.
// Under leader migration it runs again for the controllers of the
// migration lease, starting the informers they added.
func (x *extras) started(ctx context.Context) {
	x.startedOnce.Do(func() {
		if x.ctx.InformersStarted != nil {
			close(x.ctx.InformersStarted)
		}
	})
	if x.metadata != nil {
		x.metadata.Start(ctx.Done())
	}
	if x.shared != nil {
		x.shared.Start(ctx.Done())
	}
}

// serveWebhooks serves the enabled webhooks on the webhook port until ctx
// ends, as upstream's app.Run does: with the CloudControllerManagerWebhook
// feature gate on, each handler at its path, answering admission reviews.
// Every replica serves them, leader or not.
func serveWebhooks(ctx context.Context, c *cloudcontrollerconfig.CompletedConfig, handlers map[string]WebhookHandler) error {
	if len(handlers) == 0 || c.WebhookSecureServing == nil || !utilfeature.DefaultFeatureGate.Enabled(cmfeatures.CloudControllerManagerWebhook) {
		return nil
	}
	mux := http.NewServeMux()
	for _, h := range handlers {
		mux.Handle(h.Path, h)
	}
	if _, _, err := c.WebhookSecureServing.Serve(mux, 0, ctx.Done()); err != nil {
		return fmt.Errorf("webhook port: %w", err)
	}
	klog.FromContext(ctx).Info("Serving webhooks", "webhooks", sets.StringKeySet(handlers).List(), "address", c.WebhookSecureServing.Listener.Addr().String())
	return nil
}
