package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// The controller's writes to a Service: status.loadBalancer with the
// LoadBalancerReady condition, and the cleanup finalizer. Both are strategic
// merge patches of the status subresource, as upstream's, made from the
// object the reconcile read, which then holds the result.

// noNodesCondition is the condition a provisioned load balancer keeps when
// it has no backends; nil (the condition removed) otherwise.
func noNodesCondition(svc *corev1.Service, nodes int) *metav1.Condition {
	if nodes > 0 {
		return nil
	}
	return &metav1.Condition{Type: ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: ConditionReasonNodes,
		Message: "The load balancer exists but no node can receive its traffic: every node is being deleted, excluded by the " +
			corev1.LabelNodeExcludeBalancers + " label or tainted " + ToBeDeletedTaint}
}

func conditionMessage(reason string, err error) string {
	var hint string
	switch reason {
	case provider.ReasonQuotaExceeded:
		hint = "The cloud's load balancer quota is used up; delete unused load balancers or raise the quota. "
	case provider.ReasonInvalidAnnotation:
		hint = "Fix the annotation on the Service; retrying with backoff meanwhile. "
	case provider.ReasonThrottled:
		hint = "The cloud is throttling requests; retrying with backoff. "
	case cloud.ReasonTimeout:
		hint = "The cloud did not answer in time; retrying with backoff. "
	case cloud.ReasonCallInFlight:
		hint = "A cloud call for this Service still runs, far past what the provider's answers take; retried once it returns. "
	}
	msg := hint + "Last error: " + err.Error()
	if len(msg) > 32000 {
		msg = msg[:32000]
	}
	return msg
}

// patchStatus sets status.loadBalancer and sets (cond != nil) or removes the
// LoadBalancerReady condition, in one patch, and only if anything changes.
func patchStatus(ctx context.Context, c client.StatusClient, svc *corev1.Service, lb corev1.LoadBalancerStatus, cond *metav1.Condition) error {
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer = lb
	if cond != nil {
		cond.ObservedGeneration = svc.Generation
		meta.SetStatusCondition(&updated.Status.Conditions, *cond)
	} else {
		meta.RemoveStatusCondition(&updated.Status.Conditions, ConditionLoadBalancerReady)
	}
	if equality.Semantic.DeepEqual(svc.Status, updated.Status) || equality.Semantic.DeepEqual(svc.Status, withDefaultIPMode(updated.Status)) {
		return nil
	}
	// A strategic merge, as upstream's: conditions merge by type, so another
	// component's condition written meanwhile is kept.
	if err := c.Status().Patch(ctx, updated, client.StrategicMergeFrom(svc)); err != nil {
		return fmt.Errorf("patching service status: %w", err)
	}
	updated.DeepCopyInto(svc)
	return nil
}

// withDefaultIPMode is status as the API server stores it: an ingress with
// an IP and no ipMode reads VIP. Without it, a provider that leaves ipMode
// unset would have its unchanged status written again on every sync.
func withDefaultIPMode(status corev1.ServiceStatus) corev1.ServiceStatus {
	out := *status.DeepCopy()
	for i, ing := range out.LoadBalancer.Ingress {
		if ing.IP != "" && ing.IPMode == nil {
			out.LoadBalancer.Ingress[i].IPMode = ptr.To(corev1.LoadBalancerIPModeVIP)
		}
	}
	return out
}

// addFinalizer puts the load balancer cleanup finalizer on svc, if missing.
func addFinalizer(ctx context.Context, c client.StatusClient, svc *corev1.Service) error {
	if slices.Contains(svc.Finalizers, Finalizer) {
		return nil
	}
	return patchFinalizer(ctx, c, svc, "finalizers")
}

// removeFinalizer takes the load balancer cleanup finalizer off svc, if
// there.
func removeFinalizer(ctx context.Context, c client.StatusClient, svc *corev1.Service) error {
	if !slices.Contains(svc.Finalizers, Finalizer) {
		return nil
	}
	return patchFinalizer(ctx, c, svc, "$deleteFromPrimitiveList/finalizers")
}

// patchFinalizer adds (key "finalizers") or deletes (key
// "$deleteFromPrimitiveList/finalizers") our finalizer alone, in a strategic
// merge patch of the status subresource, as upstream's service controller
// writes it; svc then holds the Service written.
//
//   - Finalizers merge as a set, so another writer's finalizer written
//     since svc was read is kept without a resourceVersion precondition.
//     (Upstream's patch, a diff of two whole lists, drops every finalizer
//     when ours was the last it saw.)
//   - The patch carries svc's UID, which the API server refuses to change:
//     one made from a stale read never lands on a Service created since
//     under the same name.
//   - The status subresource spares the API server the Service update's
//     allocation pass and spec validation: in a burst of new Services, a
//     load balancer costs the API server the writes upstream's costs. The
//     managedFields entry is upstream's too (subresource status).
func patchFinalizer(ctx context.Context, c client.StatusClient, svc *corev1.Service, key string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": svc.UID, key: []string{Finalizer}}})
	if err != nil {
		return fmt.Errorf("patching service finalizers: %w", err)
	}
	updated := svc.DeepCopy()
	if err := c.Status().Patch(ctx, updated, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("patching service finalizers: %w", err)
	}
	updated.DeepCopyInto(svc)
	return nil
}

// providerName names the provider in an Event about its answer: the
// layer's name for it, else the Provider tag.
func (r *reconciler) providerName() string {
	if r.opts.Provider != "" {
		return r.opts.Provider
	}
	return "(unnamed)"
}
