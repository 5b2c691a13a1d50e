package manager

import (
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/secureserving"
	"github.com/outrigger-ccm/outrigger/internal/tenants"
)

// consolePath is where the secure port serves the web console, behind the
// same authentication and authorization as /metrics: a caller needs get on
// the non-resource URL /console/* (docs/console.md).
const consolePath = "/console/"

// addConsole serves the read-only console on the secure port. Its
// informers start at the first request, so an unvisited console costs
// nothing.
func addConsole(mgr manager.Manager, port *secureserving.Server, cfg *rest.Config, opts *Options, configured []*configuredProvider, degraded func() []string) error {
	if port == nil {
		return nil
	}
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("console client: %w", err)
	}
	// The same identity as the controllers': deploy/rbac-gateway.yaml lets
	// it list and watch the Gateway API's kinds.
	gw, err := gwclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("console Gateway API client: %w", err)
	}
	// The nodes come from the manager's cache, shared with the
	// controllers: one copy of each node in the process.
	co := console.Options{Client: client, Gateway: gw, Gatherer: metrics.Registry, Nodes: mgr.GetCache(), Degraded: degraded, Log: klog.Background().WithName("console")}
	for _, u := range configured {
		for _, class := range u.classes {
			co.Owners = append(co.Owners, console.Owner{Provider: u.name, Class: class, Platforms: u.platforms.Schemes()})
		}
	}
	if opts.AllocateNodeCIDRs && opts.ClusterCIDR != "" {
		// Validate has checked the CIDRs; a mask that does not fit only
		// leaves the pools out.
		co.Ranges, _ = console.ClusterRanges(opts.ClusterCIDR, opts.NodeCIDRMaskSizeIPv4, opts.NodeCIDRMaskSizeIPv6)
	}
	if rs, ok := configured[0].provider.(console.RangeSource); ok {
		co.RangeSource = rs
	}
	srv := console.New(co)
	if err := mgr.Add(srv); err != nil {
		return err
	}
	return serveConsole(port, srv)
}

// addTenantsConsole serves tenant mode's console on the secure port: the
// tenants as this replica sees them and the cloud calls of all of them. It
// reads no cluster of its own: the management cluster's objects are not
// Outrigger's, and each tenant's are in its own cluster.
func addTenantsConsole(mgr manager.Manager, port *secureserving.Server, rec *tenants.Reconciler) error {
	if port == nil {
		return nil
	}
	srv := console.New(console.Options{Gatherer: metrics.Registry, Tenants: consoleTenants(rec), Log: klog.Background().WithName("console")})
	if err := mgr.Add(srv); err != nil {
		return err
	}
	return serveConsole(port, srv)
}

// serveConsole mounts srv at consolePath.
func serveConsole(port *secureserving.Server, srv *console.Server) error {
	if err := port.AddHandler(consolePath, http.StripPrefix(consolePath[:len(consolePath)-1], srv.Handler())); err != nil {
		return fmt.Errorf("serving the console: %w", err)
	}
	// The page's links are relative: /console must end with a slash.
	return port.AddHandler("/console", http.RedirectHandler(consolePath, http.StatusMovedPermanently))
}
