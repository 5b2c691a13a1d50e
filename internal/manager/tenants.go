package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/internal/eventqueue"
	"github.com/outrigger-ccm/outrigger/internal/tenants"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// tenantRun is what one tenant's manager is built from besides the flags:
// its API server, its provider configuration, its share of a cloud
// account's budget.
type tenantRun struct {
	name        string
	restConfig  *rest.Config
	cloudConfig []byte
	account     *cloud.Account
}

// tenantMode reports whether these options serve many clusters: the
// process's own kubeconfig is then the management cluster, and each tenant
// gets a manager built from a copy of the options.
func (o *Options) tenantMode() bool {
	return o.tenant == nil && (o.TenantsNamespace != "" || o.TenantsSelector != "" || o.TenantsDir != "")
}

// tenantName is the tenant these options serve, "" outside tenant mode:
// the tenant label of Outrigger's own per-cluster metrics.
func (o *Options) tenantName() string {
	if o.tenant == nil {
		return ""
	}
	return o.tenant.name
}

// forgetTenantMetrics deletes the series of a tenant whose manager has
// stopped on this replica (removed, restarted, or taken by another
// replica), so that /metrics shows only the tenants served here and no
// gauge of a stopped one stays at its last value. The node controller's
// gauges go with their controller (they are read at each scrape).
func forgetTenantMetrics(tenant string) {
	cloud.ForgetTenant(tenant)
	service.ForgetTenant(tenant)
	eventqueue.ForgetTenant(tenant)
	clusterIdentityUnavailable.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	clusterIdentityReadsTotal.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
}

func (o *Options) validateTenants() []error {
	if !o.tenantMode() {
		return nil
	}
	var errs []error
	if o.TenantsNamespace == "" {
		errs = append(errs, errors.New("--tenants-selector and --tenants-dir need --tenants-namespace, where the tenant Leases are"))
	}
	if o.TenantsSelector == "" && o.TenantsDir == "" {
		errs = append(errs, errors.New("--tenants-namespace needs --tenants-selector (the tenants' Secrets) or --tenants-dir (their kubeconfig files)"))
	}
	if o.TenantsSelector != "" {
		if _, err := labels.Parse(o.TenantsSelector); err != nil {
			errs = append(errs, fmt.Errorf("--tenants-selector: %w", err))
		}
	}
	if o.CloudProvidersFile != "" {
		errs = append(errs, errors.New("--cloud-providers-file does not go with tenant mode yet: give --cloud-provider, and each tenant's cloud-config in its Secret"))
	}
	return errs
}

// newTenantMode builds the process of tenant mode: a manager on the
// management cluster holding the tenants' reconciler (which builds one
// manager per tenant this replica serves, with New) and the secure port.
// It runs no leader election of its own: the tenant Leases share the work.
func newTenantMode(ctx context.Context, opts *Options, reg *provider.Registry) (manager.Manager, error) {
	cfg, err := restConfig(opts)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Logger:                 withCleanStop(ctrl.Log.WithName("tenants")),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		HealthProbeBindAddress: "0",
		Metrics:                metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the management cluster's manager: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("management cluster client: %w", err)
	}
	var selector labels.Selector
	if opts.TenantsSelector != "" {
		selector, _ = labels.Parse(opts.TenantsSelector) // validated
	}
	// A tenant without its own cloud-config uses the process's.
	var shared []byte
	if opts.CloudConfig != "" {
		if shared, err = os.ReadFile(opts.CloudConfig); err != nil {
			return nil, fmt.Errorf("cannot read --cloud-config: %w", err)
		}
	}
	identity := opts.TenantsReplicaID
	if identity == "" {
		host, _ := os.Hostname()
		identity = host + "_" + uuid.NewString()
	}
	accounts := cloud.NewAccounts(opts.CloudQPS, opts.CloudBurst)
	start := func(ctx context.Context, t tenants.Tenant, cfg *rest.Config, _ string) error {
		o := *opts
		o.Serving.BindPort = 0 // the process's port serves; tenants add none
		o.CloudConfig = ""
		cc := t.CloudConfig
		if len(cc) == 0 {
			cc = shared
		}
		account := t.Account
		if account == "" {
			account = tenants.DefaultAccount(opts.CloudProvider, cc)
		}
		o.tenant = &tenantRun{name: t.Name, restConfig: cfg, cloudConfig: cc, account: accounts.Get(account)}
		if o.LeaderElect {
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			// Not being able to free it only costs time: the elector waits
			// the Lease out.
			if _, err := freeExpiredLease(ctx, c, o.LeaderElectResourceNamespace, o.LeaderElectResourceName, time.Now()); err != nil {
				klog.FromContext(ctx).Error(err, "Leaving the leader Lease to the elector")
			}
		}
		klog.FromContext(ctx).V(2).Info("Building tenant's controllers", "account", account)
		// Also when building fails: its call layers have set their
		// limits' gauges by then.
		defer forgetTenantMetrics(t.Name)
		m, err := New(ctx, &o, reg)
		if err != nil {
			return err
		}
		return m.Start(ctx)
	}
	rec, err := tenants.New(tenants.Options{
		Client:        client,
		Namespace:     opts.TenantsNamespace,
		Selector:      selector,
		Dir:           opts.TenantsDir,
		Identity:      identity,
		LeaseDuration: opts.LeaderElectLeaseDuration,
		Period:        opts.LeaderElectRetryPeriod,
		Start:         start,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(rec); err != nil {
		return nil, err
	}
	readyz := map[string]healthz.Checker{"ping": healthz.Ping}
	port, err := securePort(ctx, opts, cfg, readyz, &healthChecks{})
	if err != nil {
		return nil, err
	}
	if err := addTenantsConsole(mgr, port, rec); err != nil {
		return nil, err
	}
	if port != nil {
		return tenantModeManager{Manager: servingManager{Manager: mgr, port: port}, tenants: rec}, nil
	}
	return tenantModeManager{Manager: mgr, tenants: rec}, nil
}

// tenantModeManager is tenant mode's manager, which can tell its tenants.
type tenantModeManager struct {
	manager.Manager
	tenants *tenants.Reconciler
}

// ConsoleTenants returns the tenants of a manager New built in tenant
// mode, as the console shows them (console.Options.Tenants), or nil for
// one serving a single cluster: `outrigger dev --clusters` serves its own
// console with them.
func ConsoleTenants(m manager.Manager) func() []console.Tenant {
	tm, ok := m.(tenantModeManager)
	if !ok {
		return nil
	}
	return consoleTenants(tm.tenants)
}

// consoleTenants converts the reconciler's view of the tenants for the
// console.
func consoleTenants(rec *tenants.Reconciler) func() []console.Tenant {
	return func() []console.Tenant {
		st := rec.Status()
		out := make([]console.Tenant, len(st))
		for i, s := range st {
			out[i] = console.Tenant{Name: s.Name, Source: s.Source, Cluster: s.Cluster, Holder: s.Holder, HeldHere: s.HeldHere,
				State: s.State, Reason: s.Reason, Message: s.Message}
			if !s.FailedAt.IsZero() {
				out[i].FailedAt = &st[i].FailedAt
			}
		}
		return out
	}
}
