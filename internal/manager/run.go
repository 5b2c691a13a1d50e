package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/secureserving"
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
	opts.warnIgnored(klog.FromContext(ctx))
	b := &build{opts: opts, reg: reg, log: klog.FromContext(ctx)}
	b.enabled, _ = opts.EnabledControllers()
	// In this order: runnables start in the order they are added, and
	// each step reads what the ones before it made.
	for _, step := range []func(context.Context) error{
		b.readMigration,
		b.newManager,
		b.buildProviders,
		b.serveHealth,
		b.writePluginToken,
		b.initProviders,
		b.watchCloudCalls,
		b.makeIdentities,
		b.addProviderControllers,
		b.addControllers,
		b.addMigrationLease,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	if b.port != nil {
		return servingManager{Manager: b.mgr, port: b.port}, nil
	}
	return b.mgr, nil
}

// build is one manager being built by New's steps.
type build struct {
	opts    *Options
	reg     *provider.Registry
	log     klog.Logger
	enabled []string
	// migration is the leader migration configuration; nil without
	// --enable-leader-migration.
	migration  *migrationConfig
	restConfig *rest.Config
	mgr        manager.Manager
	informers  *sharedInformers
	configured []*configuredProvider
	readyz     map[string]healthz.Checker
	health     *healthChecks
	port       *secureserving.Server
	// ids hands each controller the manager acting as its identity.
	ids *identities
	// migrated holds what runs under the migration lease.
	migrated *deferringManager
}

// readMigration reads the leader migration configuration.
func (b *build) readMigration(context.Context) error {
	if !b.opts.EnableLeaderMigration {
		return nil
	}
	var extra []string
	for _, c := range b.opts.extraControllers() {
		extra = append(extra, c.Name)
	}
	var err error
	if ext := b.opts.Extension; ext != nil && ext.LeaderMigration != nil {
		b.migration, err = fromUpstream(ext.LeaderMigration, extra...)
	} else {
		b.migration, err = loadMigrationConfig(b.opts.LeaderMigrationConfig, extra...)
	}
	return err
}

// newManager makes the controller-runtime manager and the client-go
// informers over its cache, and hands both to a provider's main.
func (b *build) newManager(context.Context) error {
	var err error
	if b.restConfig, err = restConfig(b.opts); err != nil {
		return err
	}
	if b.mgr, err = ctrl.NewManager(b.restConfig, managerOptions(b.opts)); err != nil {
		return fmt.Errorf("creating the controller manager: %w", err)
	}
	coreClient, err := kubernetes.NewForConfig(b.restConfig)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	b.informers = newSharedInformers(b.mgr.GetCache(), b.mgr.GetScheme(), coreClient)
	b.migrated = &deferringManager{Manager: b.mgr}
	if ext := b.opts.Extension; ext != nil && ext.Prepare != nil {
		return ext.Prepare(b.mgr, b.informers)
	}
	return nil
}

// buildProviders builds the providers and checks that each can tell this
// cluster's cloud resources from others'.
func (b *build) buildProviders(context.Context) error {
	var err error
	if b.configured, err = configureProviders(b.opts, b.reg); err != nil {
		return err
	}
	if err := checkSchemes(b.configured); err != nil {
		return err
	}
	// Upstream's app.Run leaves the cluster ID to the cloud initializer
	// (its sample's refuses an untagged cloud, DigitalOcean's does not):
	// a provider's own main (an Extension) gets the same, Outrigger's own
	// binary refuses as upstream's sample does.
	for _, u := range b.configured {
		if b.opts.Extension == nil && !u.provider.HasClusterID() {
			if !b.opts.AllowUntaggedCloud {
				return fmt.Errorf("provider %q reports no cluster ID, which it needs to tell this cluster's cloud resources from others'; tag the cluster, or pass --allow-untagged-cloud", u.name)
			}
			b.log.Info("Warning: the provider reports no cluster ID; a cluster ID will be required in the future, tag your cluster", "provider", u.name)
		}
	}
	return nil
}

// serveHealth binds the secure port with /healthz and /readyz, and the
// console.
func (b *build) serveHealth(ctx context.Context) error {
	b.readyz = map[string]healthz.Checker{"ping": healthz.Ping}
	b.health = &healthChecks{}
	if ext := b.opts.Extension; ext != nil {
		b.health.added = ext.HealthCheck
	}
	var err error
	if b.port, err = securePort(ctx, b.opts, b.restConfig, b.readyz, b.health); err != nil {
		return err
	}
	// Ready once the node cache has synced: before that, this replica could
	// not do the leader's work if it took over.
	b.readyz["informer-sync"] = func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !b.mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced yet")
		}
		return nil
	}
	// A provider that can tell whether it is ready (a plugin) makes this
	// replica unready when it is not.
	for _, u := range b.configured {
		if p, ok := u.provider.(interface{ Ready(context.Context) error }); ok {
			check := "provider"
			if u.tag != "" {
				check += "-" + u.tag
			}
			b.readyz[check] = cachedCheck(time.Second, p.Ready)
		}
	}
	return addConsole(b.mgr, b.port, b.restConfig, b.opts, b.configured, degradedList(b.degraded))
}

// degraded are the degraded method families, by "provider/family" (the
// layers are built by initProviders, before anything asks).
func (b *build) degraded() map[string]int64 {
	out := map[string]int64{}
	for _, u := range b.configured {
		if u.layer == nil {
			continue
		}
		for f, n := range u.layer.Degraded() {
			out[u.name+"/"+string(f)] = n
		}
	}
	return out
}

// initProviders reads the cluster's identity, initializes each provider
// once this replica leads, and puts the cloud-call layer in front of it.
func (b *build) initProviders(context.Context) error {
	cluster, err := addClusterIdentity(b.mgr, b.restConfig, b.opts)
	if err != nil {
		return err
	}
	for _, u := range b.configured {
		u.init = newProviderInit(u.provider, u.name, b.restConfig, b.opts, cluster, b.informers)
		if err := b.mgr.Add(u.init); err != nil {
			return err
		}
		lo := b.opts.callLayer()
		lo.Name = u.name
		// The node controller's address refresh period: a node it
		// initialized is not asked about again by the refresh before.
		lo.RefreshPeriod = b.opts.NodeStatusUpdateFrequency
		if t := b.opts.tenant; t != nil {
			// The account's budget, shared in turn with the other
			// tenants on the same cloud account.
			lo.Account, lo.Tenant = t.account, t.name
		}
		u.layer = cloud.New(u.provider, lo)
	}
	return nil
}

// watchCloudCalls makes a provider hung on many objects make this replica
// unready, naming the method family (the work of other objects goes on
// meanwhile), and says so in Events on the Lease.
func (b *build) watchCloudCalls(context.Context) error {
	b.readyz["cloud-calls"] = func(*http.Request) error {
		if d := degradedList(b.degraded)(); len(d) > 0 {
			return fmt.Errorf("provider calls abandoned at their deadline and not returned, by provider/method family: %s", strings.Join(d, "; "))
		}
		return nil
	}
	return b.mgr.Add(&degradedEvents{
		degraded: b.degraded,
		recorder: b.mgr.GetEventRecorderFor("cloud-controller-manager"), //nolint:staticcheck // core/v1 Events, as upstream writes them
		lease:    b.lease(b.opts.LeaderElectResourceName),
		period:   5 * time.Second,
	})
}

// lease refers to the leader-election Lease of that name, where Events
// about the whole replica go.
func (b *build) lease(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
		Namespace: b.opts.LeaderElectResourceNamespace, Name: name}
}

// makeIdentities prepares the identities controllers act as.
func (b *build) makeIdentities(context.Context) error {
	var err error
	b.ids, err = newIdentities(b.mgr, b.restConfig, b.opts)
	return err
}

// addProviderControllers adds the provider's own controllers, under the
// main lease or, as upstream's, under the migration lease when the
// migration configuration names them.
func (b *build) addProviderControllers(context.Context) error {
	var extra, extraMigrated []Controller
	for _, c := range b.opts.extraControllers() {
		if !slices.Contains(b.enabled, c.Name) {
			continue
		}
		if b.migration != nil {
			switch role, component := b.migration.role(c.Name); role {
			case roleOther:
				b.log.Info("Not running provider controller: leader migration assigns it to another component", "controller", c.Name, "component", component)
				continue
			case roleMigrated:
				extraMigrated = append(extraMigrated, c)
				b.log.Info("Enabled provider controller", "controller", c.Name, "lease", b.migration.LeaderName)
				continue
			}
		}
		extra = append(extra, c)
		b.log.Info("Enabled provider controller", "controller", c.Name, "lease", "main")
	}
	for _, group := range []struct {
		controllers []Controller
		target      manager.Manager
		lease       string
	}{{extra, b.mgr, b.opts.LeaderElectResourceName}, {extraMigrated, b.migrated, ""}} {
		if len(group.controllers) == 0 {
			continue
		}
		lease := group.lease
		if lease == "" {
			lease = b.migration.LeaderName
		}
		// After the provider's Initialize, as upstream starts them.
		pc := &providerControllers{controllers: group.controllers, started: b.opts.Extension.Started, health: b.health,
			recorder: b.mgr.GetEventRecorderFor("cloud-controller-manager"), //nolint:staticcheck // core/v1 Events, as upstream writes them
			lease:    b.lease(lease)}
		if err := (afterInit{Manager: group.target, done: b.configured[0].init.done}).Add(pc); err != nil {
			return err
		}
	}
	return nil
}

// addMigrationLease runs what the migration configuration assigns to this
// component while this replica holds the migration lease.
func (b *build) addMigrationLease(context.Context) error {
	if len(b.migrated.runnables) == 0 {
		return nil
	}
	client, err := kubernetes.NewForConfig(b.restConfig)
	if err != nil {
		return fmt.Errorf("leader migration client: %w", err)
	}
	return b.mgr.Add(&migrationLease{cfg: b.migration, opts: b.opts, client: client, runnables: b.migrated.runnables})
}
