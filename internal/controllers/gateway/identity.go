package gateway

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Each Gateway's data plane pods run as their own ServiceAccount, whose
// Role lets them read their own programming Secret and nothing else: the
// data plane namespace holds every Gateway's configuration and private
// keys, and a pod of one Gateway (serving the internet, holding a tenant's
// routes) must not read another's. A PodDisruptionBudget keeps one of the
// pods serving through node drains. These companions of the Deployment
// carry the Gateway's name and are deleted with its data plane. The
// ServiceAccount carries spec.infrastructure's labels and annotations too,
// as the pods and the Service do: it is the pods' identity, which the
// Gateway API asks to carry them (a workload identity annotation is given
// there), and what the GatewayInfrastructure conformance test reads first.

// companions are the objects a Gateway's data plane Deployment needs: its
// pods' identity (ServiceAccount, Role, RoleBinding) and their disruption
// budget.
func (r *reconciler) companions(gw *gwv1.Gateway, replicas int32) []client.Object {
	meta := r.ownedMeta(gw, false)
	name := meta.Name
	sa := &corev1.ServiceAccount{ObjectMeta: r.ownedMeta(gw, true), AutomountServiceAccountToken: ptrTo(true)}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"},
		// list and watch by name: the data plane watches its Secret
		// with a metadata.name field selector, which RBAC matches
		// against resourceNames.
		Verbs: []string{"get", "list", "watch"}, ResourceNames: []string{name},
	}}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: meta.Namespace}},
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: meta, Spec: disruptionBudget(replicas, r.selector(gw))}
	return []client.Object{sa, role, rb, pdb}
}

// ensureCompanions makes the Deployment's companions where missing. It runs only
// when the Deployment is made or changed, so it costs no call otherwise; an
// object of that name that is not Outrigger's for this Gateway stops it.
func (r *reconciler) ensureCompanions(ctx context.Context, gw *gwv1.Gateway, replicas int32) error {
	for _, want := range r.companions(gw, replicas) {
		err := r.client.Create(ctx, want)
		if err == nil {
			continue
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the data plane's %T %s: %w", want, want.GetName(), err)
		}
		cur := want.DeepCopyObject().(client.Object)
		if err := r.own.Get(ctx, client.ObjectKeyFromObject(want), cur); err != nil {
			return fmt.Errorf("reading the data plane's %T %s: %w", want, want.GetName(), err)
		}
		if !owned(cur, gw) {
			return fmt.Errorf("%T %s/%s is not Outrigger's for this Gateway (UID %s); not using it", want, want.GetNamespace(), want.GetName(), gw.UID)
		}
		// The ServiceAccount follows the infrastructure's labels and
		// annotations, added as on the Service (one removed from the
		// Gateway stays); the budget follows the replicas; the rest never
		// changes.
		if sa, ok := cur.(*corev1.ServiceAccount); ok {
			if upd, changed := withMeta(sa, want.(*corev1.ServiceAccount).ObjectMeta); changed {
				if err := r.client.Update(ctx, upd); err != nil {
					return fmt.Errorf("updating the data plane's ServiceAccount %s: %w", want.GetName(), err)
				}
			}
		}
		if pdb, ok := cur.(*policyv1.PodDisruptionBudget); ok && !equality.Semantic.DeepEqual(pdb.Spec, want.(*policyv1.PodDisruptionBudget).Spec) {
			upd := pdb.DeepCopy()
			upd.Spec = want.(*policyv1.PodDisruptionBudget).Spec
			if err := r.client.Update(ctx, upd); err != nil {
				return fmt.Errorf("updating the data plane's PodDisruptionBudget %s: %w", want.GetName(), err)
			}
		}
	}
	return nil
}

// disruptionBudget keeps one pod serving through voluntary disruptions
// (node drains) when there are two or more; a single pod is allowed to go,
// since a budget of one of one would hold every drain of its node forever.
func disruptionBudget(replicas int32, selector map[string]string) policyv1.PodDisruptionBudgetSpec {
	spec := policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: selector}}
	if replicas >= 2 {
		spec.MinAvailable = ptrTo(intstr.FromInt32(1))
	} else {
		spec.MaxUnavailable = ptrTo(intstr.FromInt32(1))
	}
	return spec
}

// withMeta is sa with want's labels and annotations added (none removed),
// and whether that changed it.
func withMeta(sa *corev1.ServiceAccount, want metav1.ObjectMeta) (*corev1.ServiceAccount, bool) {
	upd := sa.DeepCopy()
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	if upd.Annotations == nil && len(want.Annotations) > 0 {
		upd.Annotations = map[string]string{}
	}
	maps.Copy(upd.Annotations, want.Annotations)
	return upd, !maps.Equal(upd.Labels, sa.Labels) || !maps.Equal(upd.Annotations, sa.Annotations)
}
