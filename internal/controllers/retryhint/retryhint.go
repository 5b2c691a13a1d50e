// Package retryhint requeues the object whose cloud call carried a retry
// hint (provider.RetryAfter) after that hint, as upstream's service
// controller does with api.RetryError. It is the controllers' side of the
// call layer's holds: internal/cloud knows nothing of reconcilers.
package retryhint

import (
	"context"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Requeue wraps r so that an error carrying a retry hint (see
// provider.RetryAfter) retries only the object that got it, after the hint, as
// upstream's service controller does with api.RetryError: the object is
// requeued with Result{RequeueAfter: hint} and its failure backoff is not
// grown, since the cloud said when to come back. Other objects are not
// delayed. A hint of zero says nothing about when, so such an error stays
// an error and the object's backoff applies; retrying it at once would only
// be throttled again.
func Requeue(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		return After(ctx, res, err)
	})
}

// After is Requeue for one result: for a reconciler
// that handles its errors itself before returning.
func After(ctx context.Context, res reconcile.Result, err error) (reconcile.Result, error) {
	if err == nil {
		return res, nil
	}
	after, ok := provider.RetryAfter(err)
	if !ok || after <= 0 {
		return res, err
	}
	// The request's object is already in the logger controller-runtime
	// puts in ctx.
	klog.FromContext(ctx).Info("Cloud asked to retry later; requeueing this object after its hint", "retryAfter", after, "err", err.Error())
	return reconcile.Result{RequeueAfter: after}, nil
}
