package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// newParametersCache is a cache of the ConfigMaps labelled
// ParametersLabel, cluster-wide, and of nothing else: the parametersRefs'
// targets, read and watched without holding every ConfigMap of the
// cluster.
func newParametersCache(mgr ctrl.Manager) (cache.Cache, error) {
	labelled, err := labels.NewRequirement(ParametersLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.NewSelector().Add(*labelled),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("cache of parameters ConfigMaps: %w", err)
	}
	return c, mgr.Add(c)
}

// configMapSource calls mapping with each change of a labelled ConfigMap.
func configMapSource(c cache.Cache, mapping handler.MapFunc) source.Source {
	return source.Kind(c, client.Object(&corev1.ConfigMap{}), handler.EnqueueRequestsFromMapFunc(mapping))
}

// gatherParameters adds to w the class's parametersRef and the ConfigMaps
// it and the Gateway's name (those that exist and are labelled).
func (r *reconciler) gatherParameters(ctx context.Context, w *world, class *gwv1.GatewayClass) error {
	w.classParameters = class.Spec.ParametersRef
	w.configMaps = map[types.NamespacedName]*corev1.ConfigMap{}
	w.parametersServed = r.params != nil
	if r.params == nil {
		return nil
	}
	var keys []types.NamespacedName
	if ref := class.Spec.ParametersRef; ref != nil && ref.Namespace != nil {
		keys = append(keys, types.NamespacedName{Namespace: string(*ref.Namespace), Name: ref.Name})
	}
	if inf := w.gateway.Spec.Infrastructure; inf != nil && inf.ParametersRef != nil {
		keys = append(keys, types.NamespacedName{Namespace: w.gateway.Namespace, Name: inf.ParametersRef.Name})
	}
	var err error
	w.configMaps, err = readConfigMaps(ctx, r.params, keys...)
	return err
}

// readConfigMaps reads the ConfigMaps of keys from the parameters cache,
// leaving out those that do not exist (or are not labelled).
func readConfigMaps(ctx context.Context, c client.Reader, keys ...types.NamespacedName) (map[types.NamespacedName]*corev1.ConfigMap, error) {
	out := map[types.NamespacedName]*corev1.ConfigMap{}
	for _, key := range keys {
		var cm corev1.ConfigMap
		switch err := c.Get(ctx, key, &cm); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("reading parameters ConfigMap %s: %w", key, err)
		}
		out[key] = &cm
	}
	return out, nil
}

// namesConfigMap says whether a ConfigMap is what a reference, given in namespace ns,
// names.
func namesConfigMap(group gwv1.Group, kind gwv1.Kind, name, ns string, cm client.Object) bool {
	return group == "" && kind == "ConfigMap" && name == cm.GetName() && ns == cm.GetNamespace()
}

func classNames(gc *gwv1.GatewayClass, cm client.Object) bool {
	ref := gc.Spec.ParametersRef
	return ref != nil && ref.Namespace != nil && namesConfigMap(ref.Group, ref.Kind, ref.Name, string(*ref.Namespace), cm)
}

// gatewaysOfParameters maps a parameters ConfigMap to the Gateways that
// read it: through their own parametersRef, or their class's.
func (r *reconciler) gatewaysOfParameters(ctx context.Context, cm client.Object) []reconcile.Request {
	var classes gwv1.GatewayClassList
	if err := r.client.List(ctx, &classes); err != nil {
		return nil
	}
	byClass := map[string]bool{}
	for i := range classes.Items {
		gc := &classes.Items[i]
		if gc.Spec.ControllerName == r.opts.ControllerName && classNames(gc, cm) {
			byClass[gc.Name] = true
		}
	}
	var gws gwv1.GatewayList
	if err := r.client.List(ctx, &gws); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, gw := range gws.Items {
		own := gw.Spec.Infrastructure != nil && gw.Spec.Infrastructure.ParametersRef != nil &&
			namesConfigMap(gw.Spec.Infrastructure.ParametersRef.Group, gw.Spec.Infrastructure.ParametersRef.Kind, gw.Spec.Infrastructure.ParametersRef.Name, gw.Namespace, cm)
		if own || byClass[string(gw.Spec.GatewayClassName)] {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
		}
	}
	return out
}

// classesOfParameters maps a parameters ConfigMap to the classes of
// controller that name it.
func classesOfParameters(c client.Client, controller gwv1.GatewayController) handler.MapFunc {
	return func(ctx context.Context, cm client.Object) []reconcile.Request {
		var classes gwv1.GatewayClassList
		if err := c.List(ctx, &classes); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range classes.Items {
			if gc := &classes.Items[i]; gc.Spec.ControllerName == controller && classNames(gc, cm) {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: gc.Name}})
			}
		}
		return out
	}
}
