package gateway

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// writeListenerSetStatuses writes the status of every ListenerSet that
// names the Gateway: taken or why not, and its listeners' as the
// Gateway's own are written.
func (r *reconciler) writeListenerSetStatuses(ctx context.Context, w *world, res *result, gatewayProgrammed bool) error {
	byKey := make(map[types.NamespacedName]*gwv1.ListenerSet, len(w.listenerSets))
	for _, s := range w.listenerSets {
		byKey[client.ObjectKeyFromObject(s)] = s
	}
	var errs []error
	for _, sr := range res.sets {
		cached, ok := byKey[sr.key]
		if !ok {
			continue
		}
		orig := cached.DeepCopy()
		set := cached.DeepCopy()
		programmed := setProgrammed(sr, gatewayProgrammed, set.Generation)
		setCondition(&set.Status.Conditions, sr.accepted)
		setCondition(&set.Status.Conditions, programmed)
		prev := make([]gwv1.ListenerStatus, 0, len(orig.Status.Listeners))
		for _, l := range orig.Status.Listeners {
			prev = append(prev, gwv1.ListenerStatus(l))
		}
		set.Status.Listeners = nil
		for _, l := range listenerStatuses(prev, sr.listeners, gatewayProgrammed) {
			set.Status.Listeners = append(set.Status.Listeners, gwv1.ListenerEntryStatus(l))
		}
		if equality.Semantic.DeepEqual(orig.Status, set.Status) {
			continue
		}
		if err := r.client.Status().Patch(ctx, set, client.MergeFrom(orig)); err != nil {
			errs = append(errs, fmt.Errorf("writing status of ListenerSet %s: %w", sr.key, err))
			continue
		}
		if was := meta.FindStatusCondition(orig.Status.Conditions, sr.accepted.Type); sr.accepted.Status == metav1.ConditionFalse &&
			(was == nil || was.Reason != sr.accepted.Reason || was.Status != sr.accepted.Status) {
			r.recorder.Eventf(set, corev1.EventTypeWarning, sr.accepted.Reason, "ListenerSet not attached to Gateway %s/%s: %s",
				w.gateway.Namespace, w.gateway.Name, sr.accepted.Message)
		}
	}
	return errors.Join(errs...)
}

// gatewayOfSet maps a ListenerSet to the Gateway it names.
func (r *reconciler) gatewayOfSet(_ context.Context, o client.Object) []reconcile.Request {
	set, ok := o.(*gwv1.ListenerSet)
	if !ok {
		return nil
	}
	if key, ok := setParentKey(set); ok {
		return []reconcile.Request{{NamespacedName: key}}
	}
	return nil
}

// setParent is the Gateway a route's parentRef to a ListenerSet reaches:
// the one the ListenerSet (read from the cache) names.
func (r *reconciler) setParent(ctx context.Context, ref gwv1.ParentReference, routeNS string) (types.NamespacedName, bool) {
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	var set gwv1.ListenerSet
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, &set); err != nil {
		return types.NamespacedName{}, false
	}
	return setParentKey(&set)
}
