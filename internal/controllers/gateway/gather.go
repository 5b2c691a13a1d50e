package gateway

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// gather reads from the cache (certificates from the API) what compiling
// the Gateway needs.
func (r *reconciler) gather(ctx context.Context, gw *gwv1.Gateway) (*world, error) {
	w := &world{
		controller: r.opts.ControllerName,
		kinds:      r.kinds,
		gateway:    gw,
		services:   map[types.NamespacedName]*corev1.Service{},
		secrets:    map[types.NamespacedName]*corev1.Secret{},
		caMaps:     map[types.NamespacedName]*corev1.ConfigMap{},
		namespaces: map[string]*corev1.Namespace{},
	}
	if r.opts.ListenerSet {
		var sets gwv1.ListenerSetList
		if err := r.client.List(ctx, &sets); err != nil {
			return nil, fmt.Errorf("listing ListenerSets: %w", err)
		}
		w.setsServed, w.setsExisting = true, make(map[types.NamespacedName]bool, len(sets.Items))
		for i := range sets.Items {
			w.setsExisting[client.ObjectKeyFromObject(&sets.Items[i])] = true
			if setNames(&sets.Items[i], gw) {
				w.listenerSets = append(w.listenerSets, &sets.Items[i])
			}
		}
	}
	for _, k := range r.kinds {
		list := k.list()
		if err := r.client.List(ctx, list); err != nil {
			return nil, fmt.Errorf("listing %ss: %w", k.name, err)
		}
		for _, o := range k.items(list) {
			if rt := (route{kind: k, obj: o}); r.names(rt, w) {
				w.routes = append(w.routes, rt)
			}
		}
	}
	var grants gwv1.ReferenceGrantList
	if err := r.client.List(ctx, &grants); err != nil {
		return nil, fmt.Errorf("listing ReferenceGrants: %w", err)
	}
	for i := range grants.Items {
		w.grants = append(w.grants, &grants.Items[i])
	}
	var nss corev1.NamespaceList
	if err := r.client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nss.Items {
		w.namespaces[nss.Items[i].Name] = &nss.Items[i]
	}
	// Services the routes name.
	addService := func(routeNS string, ref gwv1.BackendObjectReference) error {
		ns := routeNS
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		key := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
		if _, ok := w.services[key]; ok {
			return nil
		}
		var svc corev1.Service
		if err := r.client.Get(ctx, key, &svc); err != nil {
			return client.IgnoreNotFound(err)
		}
		w.services[key] = &svc
		return nil
	}
	var errs []error
	for _, rt := range w.routes {
		for _, ref := range rt.kind.backendRefs(rt.obj) {
			errs = append(errs, addService(rt.obj.GetNamespace(), ref))
		}
	}
	// Certificates, read from the API: Outrigger caches no Secrets. The
	// listeners' and the one presented to backends (backendclient.go).
	// Those of a ListenerSet's listeners are read for the ListenerSet,
	// once the Gateway takes it.
	type certRef struct {
		fromNS, fromKind string
		ref              gwv1.SecretObjectReference
	}
	var certRefs []certRef
	for _, l := range gw.Spec.Listeners {
		if l.TLS != nil {
			for _, ref := range l.TLS.CertificateRefs {
				certRefs = append(certRefs, certRef{gw.Namespace, kindGateway, ref})
			}
		}
	}
	for _, set := range w.listenerSets {
		if setAllowed(w, set) != "" {
			continue
		}
		for _, l := range set.Spec.Listeners {
			if l.TLS != nil {
				for _, ref := range l.TLS.CertificateRefs {
					certRefs = append(certRefs, certRef{set.Namespace, kindListenerSet, ref})
				}
			}
		}
	}
	if ref := backendClientRef(gw); ref != nil {
		certRefs = append(certRefs, certRef{gw.Namespace, kindGateway, *ref})
	}
	for _, cr := range certRefs {
		key, ok := readableSecret(cr.fromNS, cr.fromKind, cr.ref, w.grants)
		if _, done := w.secrets[key]; !ok || done {
			continue // read already, or compile says why: not a Secret, or not granted
		}
		if r.secretReads != nil {
			if err := r.secretReads.Wait(ctx); err != nil {
				return w, err
			}
		}
		var s corev1.Secret
		if err := r.reader.Get(ctx, key, &s); err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				errs = append(errs, fmt.Errorf("reading certificate Secret %s: %w", key, err))
			}
			continue
		}
		w.secrets[key] = &s
	}
	// The certificate authorities client validation names, read as the
	// certificates are.
	for _, l := range gw.Spec.Listeners {
		v := frontendValidation(gw, l.Port)
		if l.Protocol != gwv1.HTTPSProtocolType || v == nil {
			continue
		}
		for _, ref := range v.CACertificateRefs {
			key, ok := readableCA(gw, ref, w.grants)
			if _, done := w.caMaps[key]; !ok || done {
				continue
			}
			if r.secretReads != nil {
				if err := r.secretReads.Wait(ctx); err != nil {
					return w, err
				}
			}
			var cm corev1.ConfigMap
			if err := r.reader.Get(ctx, key, &cm); err != nil {
				if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
					errs = append(errs, fmt.Errorf("reading CA ConfigMap %s: %w", key, err))
				}
				continue
			}
			w.caMaps[key] = &cm
		}
	}
	return w, errors.Join(errs...)
}

// names says whether a route names the Gateway (or one of its
// ListenerSets) as a parent, or carries a status of Outrigger's for it (so
// that status is cleaned up).
func (r *reconciler) names(rt route, w *world) bool {
	for _, p := range rt.kind.parentRefs(rt.obj) {
		if w.isParent(p, rt.obj.GetNamespace()) {
			return true
		}
	}
	for _, s := range *rt.kind.parentStatuses(rt.obj) {
		if s.ControllerName == r.opts.ControllerName && (w.isParent(s.ParentRef, rt.obj.GetNamespace()) || w.goneSet(s.ParentRef, rt.obj.GetNamespace())) {
			return true
		}
	}
	return false
}

// Certificate Secret reads a second, and their burst, for all Gateways.
const (
	secretReadsPerSecond = 20
	secretReadsBurst     = 50
)

// readableSecret is the Secret a certificateRef names, when Outrigger may
// read it for the object of fromKind in fromNS (the Gateway, or a
// ListenerSet): a Secret (no other group or kind), in that object's
// namespace or in one whose ReferenceGrant allows that kind of it. A ref
// that is neither is never read, so that a Gateway cannot make Outrigger
// read another namespace's Secret, or learn whether it exists.
func readableSecret(fromNS, fromKind string, ref gwv1.SecretObjectReference, grants []*gwv1.ReferenceGrant) (types.NamespacedName, bool) {
	if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != kindSecret) {
		return types.NamespacedName{}, false
	}
	ns := fromNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	if ns != fromNS && !granted(grants, groupGateway, fromKind, fromNS, "", kindSecret, ns, string(ref.Name)) {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}
