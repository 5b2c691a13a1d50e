package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// backendCARecheck is how often a Gateway whose backends' policies name
// CA ConfigMaps reads them again: they are read, not watched (Outrigger
// caches no ConfigMaps but the labelled parameters), and a bundle emptied
// or replaced must stop or change what the data plane trusts soon.
const backendCARecheck = 10 * time.Second

// maxPolicyAncestors is the most ancestors a policy status holds (the
// CRD's limit).
const maxPolicyAncestors = 16

// gatherPolicies reads the BackendTLSPolicies that concern gw (they
// target a Service its routes name, or carry its status entry, to be
// cleaned up) and the CA ConfigMaps of the former, from the API as
// certificates are.
func (r *reconciler) gatherPolicies(ctx context.Context, w *world) error {
	if !r.opts.BackendTLSPolicy {
		return nil
	}
	var list gwv1.BackendTLSPolicyList
	if err := r.client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing BackendTLSPolicies: %w", err)
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		targets := slices.ContainsFunc(policyTargets(p), func(t policyTarget) bool { return w.services[t.service] != nil })
		if !targets && !r.hasAncestor(p, w.gateway) {
			continue
		}
		w.tlsPolicies = append(w.tlsPolicies, p)
		if !targets {
			continue
		}
		for _, ref := range p.Spec.Validation.CACertificateRefs {
			key := types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)}
			if _, done := w.caMaps[key]; ref.Group != "" || ref.Kind != kindConfigMap || done {
				continue
			}
			if r.secretReads != nil {
				if err := r.secretReads.Wait(ctx); err != nil {
					return err
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
	return errors.Join(errs...)
}

// hasAncestor says whether a policy carries this controller's status
// entry for gw.
func (r *reconciler) hasAncestor(p *gwv1.BackendTLSPolicy, gw *gwv1.Gateway) bool {
	return slices.ContainsFunc(p.Status.Ancestors, func(a gwv1.PolicyAncestorStatus) bool {
		return a.ControllerName == r.opts.ControllerName && refersTo(a.AncestorRef, p.Namespace, gw)
	})
}

// writePolicyStatuses writes this Gateway's ancestor entry on every
// policy that concerns it, and removes it from those that no longer do,
// leaving other entries alone.
func (r *reconciler) writePolicyStatuses(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) error {
	var errs []error
	for _, p := range w.tlsPolicies {
		var want *policyVerdict
		for _, v := range res.policies {
			if v.policy == p {
				want = v
			}
		}
		before := p.Status.Ancestors
		var next []gwv1.PolicyAncestorStatus
		var conds []metav1.Condition
		for _, a := range before {
			if a.ControllerName == r.opts.ControllerName && refersTo(a.AncestorRef, p.Namespace, gw) {
				conds = slices.Clone(a.Conditions) // transition times of unchanged conditions kept
				continue
			}
			next = append(next, a)
		}
		if want != nil {
			setCondition(&conds, want.accepted)
			setCondition(&conds, want.resolved)
			if len(next) < maxPolicyAncestors {
				next = append(next, gwv1.PolicyAncestorStatus{AncestorRef: policyAncestor(gw), ControllerName: r.opts.ControllerName, Conditions: conds})
			} else {
				ctrl.LoggerFrom(ctx).Info("BackendTLSPolicy has the most ancestors its status holds; this Gateway's left out", "policy", client.ObjectKeyFromObject(p))
			}
		}
		if equality.Semantic.DeepEqual(before, next) {
			continue
		}
		if next == nil {
			next = []gwv1.PolicyAncestorStatus{}
		}
		o := p.DeepCopy()
		o.Status.Ancestors = next
		if err := r.client.Status().Update(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("writing status of BackendTLSPolicy %s: %w", client.ObjectKeyFromObject(p), err))
			continue
		}
		if want != nil {
			for _, c := range []metav1.Condition{want.accepted, want.resolved} {
				if c.Status == metav1.ConditionFalse {
					r.recorder.Eventf(o, corev1.EventTypeWarning, c.Reason, "%s %s: %s", gw.Name, c.Type, c.Message)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// gatewaysOfPolicy maps a BackendTLSPolicy to the Gateways whose routes
// name a Service it targets, and those whose status entry it carries.
func (r *reconciler) gatewaysOfPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	p, ok := o.(*gwv1.BackendTLSPolicy)
	if !ok {
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var out []reconcile.Request
	add := func(rs []reconcile.Request) {
		for _, rq := range rs {
			if !seen[rq.NamespacedName] {
				seen[rq.NamespacedName] = true
				out = append(out, rq)
			}
		}
	}
	for _, t := range policyTargets(p) {
		add(r.gatewaysOfService(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: t.service.Namespace, Name: t.service.Name}}))
	}
	for _, a := range p.Status.Ancestors {
		if a.ControllerName != r.opts.ControllerName || (a.AncestorRef.Kind != nil && *a.AncestorRef.Kind != kindGateway) {
			continue
		}
		ns := p.Namespace
		if a.AncestorRef.Namespace != nil {
			ns = string(*a.AncestorRef.Namespace)
		}
		add([]reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: string(a.AncestorRef.Name)}}})
	}
	return out
}
