package manager

import (
	"context"
	"errors"
	"fmt"
	cmconfig "k8s.io/controller-manager/config"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/yaml"
)

// Leader migration (KEP-2436) lets the controllers a kube-controller-manager
// ran in-tree (routes, services, node lifecycle) move to a CCM without both
// running them for a moment: each controller manager takes its main lease
// for the controllers it keeps, and a shared migration lease for the ones
// that move. Outrigger reads upstream's LeaderMigrationConfiguration and
// takes part as the component "cloud-controller-manager".

// migrationComponent is the component name Outrigger answers to in a
// LeaderMigrationConfiguration, upstream CCM's.
const migrationComponent = "cloud-controller-manager"

// migrationConfig is upstream's LeaderMigrationConfiguration
// (controllermanager.config.k8s.io).
type migrationConfig struct {
	Kind              string             `json:"kind"`
	APIVersion        string             `json:"apiVersion"`
	LeaderName        string             `json:"leaderName"`
	ResourceLock      string             `json:"resourceLock"`
	ControllerLeaders []controllerLeader `json:"controllerLeaders"`
}

type controllerLeader struct {
	Name      string `json:"name"`
	Component string `json:"component"`
}

// defaultMigrationConfig is upstream's default: the three controllers that
// left kube-controller-manager, run by whichever manager holds the lease.
func defaultMigrationConfig() *migrationConfig {
	return &migrationConfig{
		Kind:         "LeaderMigrationConfiguration",
		APIVersion:   "controllermanager.config.k8s.io/v1",
		LeaderName:   "cloud-provider-extraction-migration",
		ResourceLock: "leases",
		ControllerLeaders: []controllerLeader{
			{Name: "route-controller", Component: "*"},
			{Name: "service-controller", Component: "*"},
			{Name: "cloud-node-lifecycle-controller", Component: "*"},
		},
	}
}

// fromUpstream is upstream's parsed configuration, validated as a file is.
func fromUpstream(u *cmconfig.LeaderMigrationConfiguration, extra ...string) (*migrationConfig, error) {
	cfg := &migrationConfig{Kind: u.Kind, APIVersion: u.APIVersion, LeaderName: u.LeaderName, ResourceLock: u.ResourceLock}
	if cfg.Kind == "" {
		cfg.Kind = "LeaderMigrationConfiguration"
	}
	if cfg.APIVersion == "" {
		cfg.APIVersion = "controllermanager.config.k8s.io/v1"
	}
	for _, l := range u.ControllerLeaders {
		cfg.ControllerLeaders = append(cfg.ControllerLeaders, controllerLeader{Name: l.Name, Component: l.Component})
	}
	if err := cfg.validate(extra); err != nil {
		return nil, fmt.Errorf("leader migration configuration: %w", err)
	}
	return cfg, nil
}

// loadMigrationConfig reads --leader-migration-config, or returns the
// default when path is empty. extra are the provider's own controllers,
// which the configuration may name as well, as upstream's.
func loadMigrationConfig(path string, extra ...string) (*migrationConfig, error) {
	if path == "" {
		return defaultMigrationConfig(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read --leader-migration-config: %w", err)
	}
	var cfg migrationConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("malformed --leader-migration-config %s: %w", path, err)
	}
	if err := cfg.validate(extra); err != nil {
		return nil, fmt.Errorf("--leader-migration-config %s: %w", path, err)
	}
	return &cfg, nil
}

func (c *migrationConfig) validate(extra []string) error {
	if c.ResourceLock == "" {
		// v1 has no resourceLock: leases, always.
		c.ResourceLock = "leases"
	}
	var errs []error
	if c.Kind != "LeaderMigrationConfiguration" {
		errs = append(errs, fmt.Errorf("kind is %q, want LeaderMigrationConfiguration", c.Kind))
	}
	if g, v, _ := strings.Cut(c.APIVersion, "/"); g != "controllermanager.config.k8s.io" || !slices.Contains([]string{"v1", "v1beta1", "v1alpha1"}, v) {
		errs = append(errs, fmt.Errorf("apiVersion is %q, want controllermanager.config.k8s.io/v1", c.APIVersion))
	}
	if c.LeaderName == "" {
		errs = append(errs, errors.New("leaderName is empty"))
	}
	if c.ResourceLock != "leases" {
		errs = append(errs, fmt.Errorf("resourceLock is %q: only leases are supported (as upstream since 1.24)", c.ResourceLock))
	}
	for i, l := range c.ControllerLeaders {
		if _, ok := migrationAliases[l.Name]; !ok && !slices.Contains(extra, l.Name) {
			errs = append(errs, fmt.Errorf("controllerLeaders[%d]: unknown controller %q", i, l.Name))
		}
		if l.Component == "" {
			errs = append(errs, fmt.Errorf("controllerLeaders[%d]: component is empty", i))
		}
	}
	return oneLine(errs)
}

// migrationRole says how this Outrigger runs a controller under migration.
type migrationRole int

const (
	// roleMain: not part of the migration, run under the main lease.
	roleMain migrationRole = iota
	// roleMigrated: run under the migration lease.
	roleMigrated
	// roleOther: another component runs it; Outrigger does not.
	roleOther
)

func (c *migrationConfig) role(controller string) (migrationRole, string) {
	for _, l := range c.ControllerLeaders {
		// Outrigger's controllers by any of their names, a provider's
		// own by its name.
		if migrationAliases[l.Name] != controller && l.Name != controller {
			continue
		}
		if l.Component == migrationComponent || l.Component == "*" {
			return roleMigrated, l.Component
		}
		return roleOther, l.Component
	}
	return roleMain, ""
}

// deferringManager hands controllers a manager whose Add keeps their
// runnables back, so that they start only once the migration lease is held.
type deferringManager struct {
	manager.Manager
	mu        sync.Mutex
	runnables []manager.Runnable
}

func (d *deferringManager) Add(r manager.Runnable) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runnables = append(d.runnables, r)
	return nil
}

// migrationLease runs the migrated controllers while holding the migration
// lease. It needs leader election, so, as upstream, it is attempted only once
// the main lease is held.
type migrationLease struct {
	cfg       *migrationConfig
	opts      *Options
	client    kubernetes.Interface
	runnables []manager.Runnable
}

func (m *migrationLease) NeedLeaderElection() bool { return true }

func (m *migrationLease) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("lease", m.opts.LeaderElectResourceNamespace+"/"+m.cfg.LeaderName)
	host, _ := os.Hostname()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, m.opts.LeaderElectResourceNamespace, m.cfg.LeaderName,
		m.client.CoreV1(), m.client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return fmt.Errorf("leader migration lock: %w", err)
	}
	// The elector runs on a context of its own, ended only once the
	// migrated controllers have stopped: releasing the lease (on shutdown)
	// while one of them still writes would let the next holder write the
	// same objects at the same time.
	electCtx, stopElecting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElecting()
	var (
		// leading is set by the elector's goroutine, read by this one.
		leading  atomic.Bool
		firstErr = make(chan error, 1)
		// mu orders starting controllers against stopping: once stopping
		// is set no controller starts, and every one started before is
		// in running, so waiting on running covers them all.
		mu       sync.Mutex
		stopping bool
		running  sync.WaitGroup
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   m.opts.LeaderElectLeaseDuration,
		RenewDeadline:   m.opts.LeaderElectRenewDeadline,
		RetryPeriod:     m.opts.LeaderElectRetryPeriod,
		ReleaseOnCancel: true,
		Name:            m.cfg.LeaderName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				// The controllers stop when the lease is lost (leadCtx)
				// or the manager stops (ctx), whichever comes first.
				runCtx, cancel := context.WithCancel(leadCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				leading.Store(true)
				log.Info("Leader migration: holding the migration lease; starting the migrated controllers", "controllers", len(m.runnables))
				for _, r := range m.runnables {
					running.Go(func() {
						if err := r.Start(runCtx); err != nil {
							select {
							case firstErr <- err:
							default:
							}
							cancel()
						}
					})
				}
				mu.Unlock()
				running.Wait()
				// A controller that failed ends the election (releasing
				// the lease) as upstream's manager exits.
				stopElecting()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader migration: %w", err)
	}
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		log.Info("Leader migration: waiting for the migration lease")
		elector.Run(electCtx) // returns when electCtx ends or the lease is lost
	}()
	stop := func() {
		mu.Lock()
		stopping = true
		mu.Unlock()
		running.Wait()
	}
	select {
	case <-elected:
		// The lease was lost (or a controller failed): the controllers
		// saw leadCtx end; wait for them before reporting.
		stop()
	case <-ctx.Done():
		stop()         // the controllers stop on ctx,
		stopElecting() // and only then is the lease released.
		<-elected
		return nil
	}
	select {
	case err := <-firstErr:
		return fmt.Errorf("a migrated controller failed: %w", err)
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	if leading.Load() {
		return errors.New("lost the leader migration lease")
	}
	return errors.New("leader migration election ended")
}
