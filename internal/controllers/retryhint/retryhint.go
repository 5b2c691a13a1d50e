// Package retryhint decides when an object whose cloud call did not succeed
// is looked at again: after the call's retry hint (provider.RetryAfter), as
// upstream's service controller does with api.RetryError, and, while an
// earlier call for it still runs, when that call returns (Returned). It is
// the controllers' side of the call layer's holds: internal/cloud knows
// nothing of reconcilers.
package retryhint

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// inFlightRecheck is when an object whose cloud call still runs is looked at
// again if the word that the call returned was lost (Returned's buffer
// full): that word, not this, is how such an object goes on.
const inFlightRecheck = 30 * time.Second

// Requeue wraps r so that an error carrying a retry hint (see
// provider.RetryAfter) retries only the object that got it, after the hint, as
// upstream's service controller does with api.RetryError: the object is
// requeued with Result{RequeueAfter: hint} and its failure backoff is not
// grown, since the cloud said when to come back. Other objects are not
// delayed. A hint of zero says nothing about when, so such an error stays
// an error and the object's backoff applies; retrying it at once would only
// be throttled again.
//
// An object refused because an earlier call for it still runs
// (cloud.ReasonCallInFlight) is not failing either: it waits for that
// call's return (Returned requeues it then) with its backoff where it was,
// so that what the call answers is retried as a first failure would be,
// as upstream's workers, which wait on their calls, retry it.
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
	if cloud.Reason(err) == cloud.ReasonCallInFlight {
		klog.FromContext(ctx).V(2).Info("A cloud call for this object still runs; looked at again when it returns", "err", err.Error())
		return reconcile.Result{RequeueAfter: inFlightRecheck}, nil
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

// Returned requeues an object whose cloud call its worker stopped waiting
// for (a straggler, cloud.ErrStillRunning) as soon as the call returns, so
// that its answer is acted on then, not after a retry backoff.
type Returned struct {
	ch chan event.GenericEvent
}

// returnedBuffer bounds the requeues waiting for the controller's queue; an
// object whose requeue finds it full is looked at again after
// inFlightRecheck.
const returnedBuffer = 4096

// NewReturned makes the requeues for one controller.
func NewReturned() *Returned {
	return &Returned{ch: make(chan event.GenericEvent, returnedBuffer)}
}

// Source is what the controller watches (WatchesRawSource) for the requeues.
func (r *Returned) Source() crsource.Source {
	return crsource.Channel(r.ch, &handler.EnqueueRequestForObject{})
}

// Context is ctx for the cloud calls about the object at key: a call of it
// left running requeues the object when it returns. Telling the queue
// never blocks the call's goroutine.
func (r *Returned) Context(ctx context.Context, key types.NamespacedName) context.Context {
	return cloud.WhenDetachedReturns(ctx, func() {
		select {
		// The queue takes only the key: an object of any kind carries it.
		case r.ch <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
		default:
		}
	})
}
