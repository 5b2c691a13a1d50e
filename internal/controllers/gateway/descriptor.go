package gateway

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/controllers/descriptor"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
)

// Descriptor is the gateway controller as the manager lists it. It is
// Outrigger's own: upstream has no such controller, so a leader-migration
// configuration cannot name it and a provider's upstream-shaped main does
// not get it by default.
var Descriptor = descriptor.Descriptor{
	Name:           Name,
	ServiceAccount: "gateway-controller",
	// The certificates of HTTPS listeners, in any namespace.
	ReadsSecrets: true,
	Served:       gatewayAPIServed,
	Skip: func(ctx context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) string {
		if why := needsLoadBalancers(p, cfg); why != "" {
			return why
		}
		return gatewayAPIAllowed(ctx, mgr)
	},
	Build: descriptor.PerProvider(setupClasses),
}

// needsLoadBalancers says why provider p cannot serve Gateways, or "". The
// provider's own layer-7 load balancers serve Gateways without a Service;
// otherwise a Service of type LoadBalancer does.
func needsLoadBalancers(p descriptor.Provider, cfg *descriptor.Config) string {
	if _, ok := p.Layer.GatewayLoadBalancer(); ok {
		return ""
	}
	if _, ok := p.Layer.LoadBalancer(); !ok {
		return fmt.Sprintf("provider %q has no load balancers", p.Name)
	}
	if !slices.Contains(cfg.Enabled, service.Name) {
		return "Gateways are served through the service controller, which is off"
	}
	return ""
}

// setupClasses adds one controller per class, as the service controller:
// a Gateway's load balancer is a Service of that class, or the provider's
// own.
func setupClasses(ctx context.Context, mgr manager.Manager, p descriptor.Provider, cfg *descriptor.Config) error {
	cloudGateways, _ := p.Layer.GatewayLoadBalancer()
	grpc := routeKindServed(ctx, mgr, "GRPCRoute", "grpcroutes")
	if grpc != "" {
		klog.FromContext(ctx).Info("Not serving GRPCRoutes", "provider", p.Name, "reason", grpc)
	}
	tlsRoutes := routeKindServed(ctx, mgr, "TLSRoute", "tlsroutes")
	if tlsRoutes != "" {
		klog.FromContext(ctx).Info("Not serving TLSRoutes", "provider", p.Name, "reason", tlsRoutes)
	}
	backendTLS := routeKindServed(ctx, mgr, "BackendTLSPolicy", "backendtlspolicies")
	if backendTLS != "" {
		klog.FromContext(ctx).Info("Not serving BackendTLSPolicies", "provider", p.Name, "reason", backendTLS)
	}
	listenerSets := routeKindServed(ctx, mgr, "ListenerSet", "listenersets")
	if listenerSets != "" {
		klog.FromContext(ctx).Info("Not serving ListenerSets", "provider", p.Name, "reason", listenerSets)
	}
	retry := httpRouteRetryServed(ctx, mgr.GetConfig())
	if retry != "" {
		klog.FromContext(ctx).V(2).Info("Not stating the retry features", "provider", p.Name, "reason", retry)
	}
	params := configMapsAllowed(ctx, mgr)
	if params != "" {
		klog.FromContext(ctx).Info("Not reading parametersRefs", "provider", p.Name, "reason", params)
	}
	mode := NamespaceShared
	if cfg.GatewayInGatewayNamespace {
		mode = NamespaceGateway
	}
	for _, class := range p.Classes {
		if err := Setup(mgr, Options{
			ControllerName:    ControllerNameFor(p.Name, class),
			ClassName:         ClassNameFor(p.Name, class),
			LoadBalancerClass: class,
			Provider:          p.ClassTag(class),
			ProviderName:      p.Name,
			Namespace:         cfg.GatewayNamespace,
			NamespaceMode:     mode,
			DataPlaneImage:    cfg.GatewayDataPlaneImage,
			Cloud:             cloudGateways,
			ClusterName:       cfg.ClusterName,
			ClusterID:         p.ClusterID,
			GRPCRoute:         grpc == "",
			TLSRoute:          tlsRoutes == "",
			BackendTLSPolicy:  backendTLS == "",
			ListenerSet:       listenerSets == "",
			HTTPRouteRetry:    retry == "",
			Parameters:        params == "",
		}); err != nil {
			return err
		}
	}
	return nil
}
