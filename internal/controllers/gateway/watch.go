package gateway

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// watch starts the Gateway controller: Gateways, and what a Gateway's
// programming is made from, each mapped to the Gateways it concerns.
func (r *reconciler) watch(mgr ctrl.Manager, own, params cache.Cache) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if params != nil {
		b = b.WatchesRawSource(configMapSource(params, r.gatewaysOfParameters))
	}
	if r.opts.DataPlaneImage != "" {
		b = b.WatchesRawSource(source.Kind(own, client.Object(&appsv1.Deployment{}), handler.EnqueueRequestsFromMapFunc(r.gatewayOf)))
	}
	for _, k := range r.kinds {
		b = b.Watches(k.object(), handler.EnqueueRequestsFromMapFunc(r.parentsOfKind(k)))
	}
	if r.opts.BackendTLSPolicy {
		b = b.Watches(&gwv1.BackendTLSPolicy{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfPolicy))
	}
	if r.opts.ListenerSet {
		b = b.Watches(&gwv1.ListenerSet{}, handler.EnqueueRequestsFromMapFunc(r.gatewayOfSet))
	}
	return b.
		Named(r.opts.name(Name)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		For(&gwv1.Gateway{}).
		Watches(&gwv1.GatewayClass{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfClass)).
		Watches(&gwv1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(r.allGateways)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.allGateways)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfService)).
		Complete(r)
}

// gatewayOf maps an object Outrigger made to its Gateway.
func (r *reconciler) gatewayOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[managedByLabel] != managedBy || l[GatewayLabel] == "" || !r.opts.placedRight(o) {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[GatewayNamespaceLabel], Name: l[GatewayLabel]}}}
}

func (r *reconciler) gatewaysOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	var gws gwv1.GatewayList
	if err := r.client.List(ctx, &gws); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, gw := range gws.Items {
		if string(gw.Spec.GatewayClassName) == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
		}
	}
	return out
}

func (r *reconciler) allGateways(ctx context.Context, _ client.Object) []reconcile.Request {
	var gws gwv1.GatewayList
	if err := r.client.List(ctx, &gws); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(gws.Items))
	for _, gw := range gws.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
	}
	return out
}

// parentsOfKind maps a route of kind k to its parents.
func (r *reconciler) parentsOfKind(k *routeKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.parentsOf(ctx, route{kind: k, obj: o})
	}
}

// parentsOf is the Gateways a route names now (itself or through one of
// its ListenerSets), and those whose status it still carries from
// Outrigger (so a removed parentRef is cleaned up).
func (r *reconciler) parentsOf(ctx context.Context, rt route) []reconcile.Request {
	seen := map[types.NamespacedName]bool{}
	add := func(ref gwv1.ParentReference) {
		if r.opts.ListenerSet && (ref.Group == nil || *ref.Group == groupGateway) && ref.Kind != nil && *ref.Kind == kindListenerSet {
			if key, ok := r.setParent(ctx, ref, rt.obj.GetNamespace()); ok {
				seen[key] = true
			}
			return
		}
		if (ref.Group != nil && *ref.Group != groupGateway) || (ref.Kind != nil && *ref.Kind != kindGateway) {
			return
		}
		ns := rt.obj.GetNamespace()
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		seen[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}] = true
	}
	for _, p := range rt.kind.parentRefs(rt.obj) {
		add(p)
	}
	for _, s := range *rt.kind.parentStatuses(rt.obj) {
		if s.ControllerName == r.opts.ControllerName {
			add(s.ParentRef)
		}
	}
	out := make([]reconcile.Request, 0, len(seen))
	for k := range seen {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	return out
}

// gatewaysOfService maps a Service to the Gateway it fronts, or to the
// Gateways whose routes send traffic to it.
func (r *reconciler) gatewaysOfService(ctx context.Context, o client.Object) []reconcile.Request {
	if own := r.gatewayOf(ctx, o); own != nil {
		return own
	}
	var out []reconcile.Request
	for _, rt := range r.allRoutes(ctx) {
		for _, ref := range rt.kind.backendRefs(rt.obj) {
			ns := rt.obj.GetNamespace()
			if ref.Namespace != nil {
				ns = string(*ref.Namespace)
			}
			if ns == o.GetNamespace() && string(ref.Name) == o.GetName() {
				out = append(out, r.parentsOf(ctx, rt)...)
				break
			}
		}
	}
	return out
}

// allRoutes lists the cached routes of every kind served.
func (r *reconciler) allRoutes(ctx context.Context) []route {
	var out []route
	for _, k := range r.kinds {
		list := k.list()
		if err := r.client.List(ctx, list); err != nil {
			continue
		}
		for _, o := range k.items(list) {
			out = append(out, route{kind: k, obj: o})
		}
	}
	return out
}
