package manager

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// leaseExpired reports whether l has a holder that last renewed it more
// than its duration before now. A Lease without a holder is free already;
// one without a renew or acquire time, or a duration, is left to the
// elector.
func leaseExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	last := l.Spec.RenewTime
	if last == nil {
		last = l.Spec.AcquireTime
	}
	if last == nil {
		return false
	}
	return now.After(last.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// freeExpiredLease empties the holder of the tenant's leader Lease
// (namespace/name) when its holder stopped renewing it a lease duration
// ago, judged on this replica's clock, as the tenant Leases are.
//
// Why: client-go's elector trusts no clock but its own. A candidate that
// sees a Lease for the first time waits a whole lease duration from that
// moment, however long ago the holder died. A replica that takes a dead
// replica's tenant has just waited out the tenant Lease, which expired
// with the leader Lease (the dead replica renewed both); without this it
// would wait a second duration before serving (31 s instead of 16 s with
// the default 15 s, measured by bench/tenants). The write carries the
// Lease's resourceVersion: a holder that renewed meanwhile keeps it.
func freeExpiredLease(ctx context.Context, client kubernetes.Interface, namespace, name string, now time.Time) (bool, error) {
	leases := client.CoordinationV1().Leases(namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the leader Lease %s/%s: %w", namespace, name, err)
	}
	if !leaseExpired(l, now) {
		return false, nil
	}
	holder := *l.Spec.HolderIdentity
	l.Spec.HolderIdentity = nil
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("freeing the expired leader Lease %s/%s: %w", namespace, name, err)
	}
	klog.FromContext(ctx).Info("Freed the tenant's expired leader Lease", "lease", namespace+"/"+name, "holder", holder,
		"renewed", l.Spec.RenewTime)
	return true, nil
}
