package gateway

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Each Gateway's data plane pods run as their own ServiceAccount, whose
// Role lets them read their own programming Secret and nothing else: the
// data plane namespace holds every Gateway's configuration and private
// keys, and a pod of one Gateway (serving the internet, holding a tenant's
// routes) must not read another's. The ServiceAccount, Role and RoleBinding
// carry the Gateway's name and are deleted with its data plane.

// identity is what a Gateway's data plane pods run as.
func (r *reconciler) identity(gw *gwv1.Gateway) []client.Object {
	meta := r.ownedMeta(gw, false)
	name := meta.Name
	sa := &corev1.ServiceAccount{ObjectMeta: meta, AutomountServiceAccountToken: ptrTo(true)}
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
	return []client.Object{sa, role, rb}
}

// ensureIdentity makes the Gateway's identity where missing. It runs only
// when the Deployment is made or changed, so it costs no call otherwise; an
// object of that name that is not Outrigger's for this Gateway stops it.
func (r *reconciler) ensureIdentity(ctx context.Context, gw *gwv1.Gateway) error {
	for _, want := range r.identity(gw) {
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
	}
	return nil
}
