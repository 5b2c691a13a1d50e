// Package descriptor is what a controller tells the manager about itself:
// its names, the ServiceAccount it acts as, why it does not start, and how
// it is set up. Each controller package declares one Descriptor; the
// manager (internal/manager) keeps the one list of them, in start order,
// and derives from it every table that used to name the controllers one by
// one: --controllers' names and aliases, the ServiceAccounts of
// --use-service-account-credentials, the leader-migration names, the skip
// rules, the setup, and package app's default constructors.
//
// It imports no controller and not the manager, so both can import it.
package descriptor

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// Descriptor describes one of Outrigger's controllers.
type Descriptor struct {
	// Name is the controller's canonical name, as upstream's, for
	// --controllers, the --help text and /healthz/<Name>.
	Name string
	// Aliases are the older names --controllers accepts for it, upstream's
	// (k8s.io/cloud-provider/names.CCMControllerAliases), so a manifest
	// written for the upstream CCM carries over.
	Aliases []string
	// Migrates says a leader-migration configuration may name it (by Name,
	// Aliases or MigrationAliases): upstream's controllers can move
	// between the kube-controller-manager and a cloud-controller-manager,
	// Outrigger's own cannot.
	Migrates bool
	// MigrationAliases are the further names a migration configuration
	// may use, the kube-controller-manager's.
	MigrationAliases []string
	// ServiceAccount is the kube-system ServiceAccount it acts as with
	// --use-service-account-credentials, upstream's name.
	ServiceAccount string
	// ReadsSecrets says that ServiceAccount may read Secrets: its
	// credentials are never handed to a provider that asks its client
	// builder for them by name (issue #59).
	ReadsSecrets bool
	// Upstream says it is one of upstream's controllers a provider's main
	// gets from app.DefaultInitFuncConstructors.
	Upstream bool
	// OnePerCluster runs it once, for the first provider, instead of once
	// per provider: node IPAM is the cluster's, whichever provider a node
	// has.
	OnePerCluster bool
	// Served, when set, says why the cluster cannot have the controller at
	// all, or "": it is asked once per manager, before the controller's
	// identity is made (a cluster without the Gateway API gets no
	// gateway-controller ServiceAccount).
	Served func(mgr manager.Manager) string
	// Skip, when set, says why the controller does not run for provider p,
	// or "". As upstream, a controller whose feature is off or whose
	// provider interface is missing is skipped with a log line, not an
	// error: a provider with only load balancers runs with the default
	// --controllers. mgr is the one the controller would be set up with,
	// acting as its identity.
	Skip func(ctx context.Context, mgr manager.Manager, p Provider, cfg *Config) string
	// Build is called once per manager that runs the controller, with all
	// of the manager's providers, and returns the setup of one provider's
	// controller: what the instances of one manager share (the node
	// controllers' Siblings) is made here.
	Build func(all []Provider) Setup
}

// Setup adds the controller serving provider p to mgr.
type Setup func(ctx context.Context, mgr manager.Manager, p Provider, cfg *Config) error

// Provider is one provider a manager runs, as its controllers see it.
type Provider struct {
	// Name is the provider's registry name.
	Name string
	// Tag is added to controller names and Event sources ("" when the
	// provider runs alone, so names are upstream's).
	Tag string
	// Layer is the cloud-call layer over the provider.
	Layer *cloud.Layer
	// Platforms are the nodes it serves.
	Platforms platform.Set
	// Classes are the load balancer classes it serves ("": Services
	// without a class), one service and gateway controller each.
	Classes []string
	// ClusterID returns the cluster's identity once the provider is
	// initialized.
	ClusterID func() string
}

// Config is what the controllers read of the flags, parsed and with
// Outrigger's defaults applied.
type Config struct {
	// Enabled are the controllers --controllers enables, canonical names.
	Enabled []string

	// Tenant is the cluster's tenant in tenant mode ("" for a single
	// cluster): the tenant label of Outrigger's own per-cluster metrics.
	Tenant string

	ClusterName string
	// ClusterCIDRs is --cluster-cidr parsed; nil when not given.
	ClusterCIDRs []netip.Prefix

	NodeWorkers      int
	LifecycleWorkers int
	ServiceWorkers   int

	NodeStatusUpdateFrequency time.Duration
	ProviderIDWait            time.Duration
	NodeMonitorPeriod         time.Duration
	OrphanSweepPeriod         time.Duration
	RouteReconciliationPeriod time.Duration

	AllocateNodeCIDRs    bool
	CIDRAllocatorType    string
	NodeCIDRMaskSizeIPv4 int
	NodeCIDRMaskSizeIPv6 int
	ConfigureCloudRoutes bool

	GatewayNamespace string
	// GatewayInGatewayNamespace makes each Gateway's data plane in the
	// Gateway's own namespace rather than in GatewayNamespace
	// (--gateway-namespace-mode=gateway).
	GatewayInGatewayNamespace bool
	GatewayDataPlaneImage     string
}

// PerProvider is the Build of a controller whose instances share nothing.
func PerProvider(setup Setup) func([]Provider) Setup {
	return func([]Provider) Setup { return setup }
}

// AllPlatforms are the nodes of all providers: a controller that runs once
// for the cluster serves them all.
func AllPlatforms(all []Provider) platform.Set {
	if len(all) == 1 {
		return all[0].Platforms
	}
	var schemes []string
	for _, p := range all {
		schemes = append(schemes, p.Platforms.Schemes()...)
	}
	slices.Sort(schemes)
	set, _ := platform.Parse(slices.Compact(schemes)) // each parsed before
	return set
}

// ClassTag is the tag of one class's controller of provider p: the
// provider's, with the class added when it serves several.
func (p Provider) ClassTag(class string) string {
	if len(p.Classes) > 1 {
		return p.Tag + "/" + class
	}
	return p.Tag
}

// NeedsInstances is the Skip of a controller that needs the provider's
// instances (InstancesV2 or Instances): the node and node lifecycle
// controllers.
func NeedsInstances(_ context.Context, _ manager.Manager, p Provider, _ *Config) string {
	if _, ok := p.Layer.Instances(); !ok {
		return fmt.Sprintf("provider %q supports neither InstancesV2 nor Instances", p.Name)
	}
	return ""
}
