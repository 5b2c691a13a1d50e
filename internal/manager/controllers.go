package manager

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/internal/controllers/route"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
)

// controllers are Outrigger's controllers, in start order. A new controller
// declares its descriptor.Descriptor in its own package and joins this
// list; everything else that names the controllers is derived from it.
var controllers = []*descriptor.Descriptor{
	&node.Descriptor,
	&nodelifecycle.Descriptor,
	&service.Descriptor,
	&nodeipam.Descriptor,
	&route.Descriptor,
	&gateway.Descriptor,
}

// Controllers returns the descriptors of Outrigger's controllers, in start
// order: package app offers upstream's among them to a provider's main.
func Controllers() []descriptor.Descriptor {
	out := make([]descriptor.Descriptor, len(controllers))
	for i, d := range controllers {
		out[i] = *d
	}
	return out
}

// shippedControllers are the names of the controllers this build runs, in
// start order.
var shippedControllers = func() []string {
	out := make([]string, len(controllers))
	for i, d := range controllers {
		out[i] = d.Name
	}
	return out
}()

// flagAliases are the older names --controllers accepts, alias to
// canonical name.
var flagAliases = func() map[string]string {
	out := map[string]string{}
	for _, d := range controllers {
		for _, a := range d.Aliases {
			out[a] = d.Name
		}
	}
	return out
}()

// serviceAccounts are the ServiceAccounts the controllers act as with
// --use-service-account-credentials, by controller.
var serviceAccounts = func() map[string]string {
	out := map[string]string{}
	for _, d := range controllers {
		out[d.Name] = d.ServiceAccount
	}
	return out
}()

// secretReaders are the ServiceAccounts of the controllers that read
// Secrets (Descriptor.ReadsSecrets), by account, with the controller.
var secretReaders = func() map[string]string {
	out := map[string]string{}
	for _, d := range controllers {
		if d.ReadsSecrets {
			out[d.ServiceAccount] = d.Name
		}
	}
	return out
}()

// migrationAliases maps the names a migration config may use (the
// kube-controller-manager's, and upstream CCM's short forms) to Outrigger's.
var migrationAliases = func() map[string]string {
	out := map[string]string{}
	for _, d := range controllers {
		if !d.Migrates {
			continue
		}
		for _, name := range slices.Concat([]string{d.Name}, d.Aliases, d.MigrationAliases) {
			out[name] = d.Name
		}
	}
	return out
}()

// descriptorOf is the controller called name, or nil.
func descriptorOf(name string) *descriptor.Descriptor {
	i := slices.IndexFunc(controllers, func(d *descriptor.Descriptor) bool { return d.Name == name })
	if i < 0 {
		return nil
	}
	return controllers[i]
}

// controllerConfig is what the controllers read of the flags.
func (o *Options) controllerConfig(enabled []string) *descriptor.Config {
	cidrs, _ := nodeipam.ParseClusterCIDRs(o.ClusterCIDR) // validated; nil when not given
	return &descriptor.Config{
		Enabled:                   slices.Clone(enabled),
		Tenant:                    o.tenantName(),
		ClusterName:               o.ClusterName,
		ClusterCIDRs:              cidrs,
		NodeWorkers:               o.NodeWorkers(),
		LifecycleWorkers:          o.LifecycleWorkers(),
		ServiceWorkers:            o.ServiceWorkers(),
		NodeStatusUpdateFrequency: o.NodeStatusUpdateFrequency,
		ProviderIDWait:            o.ProviderIDWait,
		NodeMonitorPeriod:         o.NodeMonitorPeriod,
		OrphanSweepPeriod:         o.OrphanSweepPeriod,
		RouteReconciliationPeriod: o.RouteReconciliationPeriod,
		AllocateNodeCIDRs:         o.AllocateNodeCIDRs,
		CIDRAllocatorType:         o.CIDRAllocatorType,
		NodeCIDRMaskSizeIPv4:      o.NodeCIDRMaskSizeIPv4,
		NodeCIDRMaskSizeIPv6:      o.NodeCIDRMaskSizeIPv6,
		ConfigureCloudRoutes:      o.ConfigureCloudRoutes,
		GatewayNamespace:          o.GatewayNamespace,
		GatewayInGatewayNamespace: o.GatewayNamespaceMode == gateway.NamespaceGateway,
		GatewayDataPlaneImage:     o.GatewayDataPlaneImage,
	}
}

// providers are the configured providers as the controllers see them.
func providers(configured []*configuredProvider) []descriptor.Provider {
	out := make([]descriptor.Provider, len(configured))
	for i, u := range configured {
		out[i] = descriptor.Provider{Name: u.name, Tag: u.tag, Layer: u.layer, Platforms: u.platforms, Classes: u.classes}
		if u.init != nil {
			out[i].ClusterID = u.init.cluster.get
		}
	}
	return out
}

// addControllers sets up the enabled controllers of Outrigger's, each
// under the lease the migration configuration gives it, acting as its
// identity, once per provider (or once for the cluster).
func (b *build) addControllers(ctx context.Context) error {
	cfg := b.opts.controllerConfig(b.enabled)
	all := providers(b.configured)
	for _, name := range b.enabled {
		d := descriptorOf(name)
		if d == nil { // a provider's own (addProviderControllers)
			continue
		}
		target := b.mgr
		lease := "main"
		if b.migration != nil {
			switch role, component := b.migration.role(name); role {
			case roleOther:
				b.log.Info("Not running controller: leader migration assigns it to another component", "controller", name, "component", component)
				continue
			case roleMigrated:
				target, lease = b.migrated, b.migration.LeaderName
			}
		}
		if d.Served != nil {
			if skip := d.Served(b.mgr); skip != "" {
				b.log.Info("Not running controller", "controller", name, "reason", skip)
				continue
			}
		}
		target, err := b.ids.forController(target, name)
		if err != nil {
			return err
		}
		setup := d.Build(all)
		each := all
		if d.OnePerCluster {
			each = all[:1]
		}
		for i, p := range each {
			if d.Skip != nil {
				if skip := d.Skip(ctx, target, p, cfg); skip != "" {
					b.log.Info("Not running controller", "controller", name, "provider", p.Name, "reason", skip)
					continue
				}
			}
			if err := setup(ctx, afterInit{Manager: target, done: b.configured[i].init.done}, p, cfg); err != nil {
				return err
			}
			// As upstream, /healthz/<name> for every controller that runs.
			b.health.add(name, healthz.Ping)
			b.log.Info("Enabled controller", "controller", name, "provider", p.Name, "lease", lease)
		}
	}
	return nil
}
