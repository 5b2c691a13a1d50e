package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The Leases' names, labels and annotations in the tenants namespace.
const (
	leasePrefix  = "outrigger-tenant-"
	memberPrefix = "outrigger-replica-"
	// LabelLease marks the Leases of tenant mode: "tenant" or "member".
	LabelLease = "outrigger.dev/tenants-lease"
	// AnnotationTenant names a tenant Lease's tenant (the Lease name may
	// not hold every Secret name).
	AnnotationTenant = "outrigger.dev/tenant"
	// AnnotationCluster is the identity (kube-system UID) of the cluster
	// the holder serves under a tenant Lease, to find two tenants naming
	// one cluster across replicas.
	AnnotationCluster = "outrigger.dev/cluster-uid"
)

// LeaseName is the name of a tenant's Lease.
func LeaseName(tenant string) string { return leasePrefix + tenant }

// memberLeaseName is a replica's member Lease: the identity may hold any
// character (a host name and a UUID, a pod name), the name a hash of it.
func memberLeaseName(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return memberPrefix + hex.EncodeToString(sum[:8])
}

// leases reads and writes the Leases of one replica.
type leases struct {
	client    kubernetes.Interface
	namespace string
	self      string
	duration  time.Duration
	now       func() time.Time
}

// read lists the tenant Leases (by tenant, with each Lease for writing)
// and the live members.
func (l *leases) read(ctx context.Context) (map[string]Claim, map[string]*coordinationv1.Lease, []string, error) {
	list, err := l.client.CoordinationV1().Leases(l.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelLease})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing the tenant Leases in %s: %w", l.namespace, err)
	}
	claims := map[string]Claim{}
	objs := map[string]*coordinationv1.Lease{}
	var members []string
	now := l.now()
	for i := range list.Items {
		lease := &list.Items[i]
		c := claimOf(lease)
		switch lease.Labels[LabelLease] {
		case "tenant":
			tenant := lease.Annotations[AnnotationTenant]
			if tenant == "" {
				continue
			}
			claims[tenant] = c
			objs[tenant] = lease
		case "member":
			if c.live(now) {
				members = append(members, c.Holder)
			}
		}
	}
	return claims, objs, members, nil
}

func claimOf(lease *coordinationv1.Lease) Claim {
	c := Claim{Holder: ptr.Deref(lease.Spec.HolderIdentity, ""), Cluster: lease.Annotations[AnnotationCluster]}
	if lease.Spec.RenewTime != nil {
		c.Renewed = lease.Spec.RenewTime.Time
	}
	c.Duration = time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second
	return c
}

// renewMember creates or renews this replica's member Lease.
func (l *leases) renewMember(ctx context.Context) error {
	name := memberLeaseName(l.self)
	lease, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace,
			Labels: map[string]string{LabelLease: "member"}}}
		l.hold(lease, "")
		_, err = l.client.CoordinationV1().Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
		return wrap(err, "creating member Lease %s", name)
	}
	if err != nil {
		return fmt.Errorf("reading member Lease %s: %w", name, err)
	}
	l.hold(lease, "")
	_, err = l.client.CoordinationV1().Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	return wrap(err, "renewing member Lease %s", name)
}

// dropMember deletes this replica's member Lease, so that the others count
// it out at once when it stops.
func (l *leases) dropMember(ctx context.Context) error {
	err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, memberLeaseName(l.self), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return wrap(err, "deleting member Lease")
}

// claim takes the tenant's Lease, creating it if there is none. cur is the
// Lease as read this round (nil: none): a replica that claimed it
// meanwhile makes this fail with a conflict, and keeps it.
func (l *leases) claim(ctx context.Context, tenant string, cur *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if cur == nil {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(tenant), Namespace: l.namespace,
			Labels:      map[string]string{LabelLease: "tenant"},
			Annotations: map[string]string{AnnotationTenant: tenant}}}
		l.hold(lease, "")
		lease.Spec.AcquireTime = lease.Spec.RenewTime
		out, err := l.client.CoordinationV1().Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
		return out, wrap(err, "creating the Lease of tenant %s", tenant)
	}
	lease := cur.DeepCopy()
	l.hold(lease, "")
	// What the last holder served is not served any more.
	delete(lease.Annotations, AnnotationCluster)
	lease.Spec.AcquireTime = lease.Spec.RenewTime
	lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	out, err := l.client.CoordinationV1().Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	return out, wrap(err, "claiming the Lease of tenant %s", tenant)
}

// renew renews a Lease this replica holds, recording the cluster its run
// serves ("": none now, while it connects or waits).
func (l *leases) renew(ctx context.Context, cur *coordinationv1.Lease, cluster string) (*coordinationv1.Lease, error) {
	lease := cur.DeepCopy()
	l.hold(lease, cluster)
	if cluster == "" {
		delete(lease.Annotations, AnnotationCluster)
	}
	out, err := l.client.CoordinationV1().Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	return out, wrap(err, "renewing Lease %s", cur.Name)
}

// release gives a Lease up for another replica to claim at once.
func (l *leases) release(ctx context.Context, cur *coordinationv1.Lease) error {
	lease := cur.DeepCopy()
	lease.Spec.HolderIdentity = nil
	delete(lease.Annotations, AnnotationCluster)
	_, err := l.client.CoordinationV1().Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	return wrap(err, "releasing Lease %s", cur.Name)
}

// forget deletes the Lease of a tenant that no longer exists, if it is
// still the one read (another replica may have claimed it anew).
func (l *leases) forget(ctx context.Context, cur *coordinationv1.Lease) error {
	err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, cur.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return wrap(err, "deleting Lease %s", cur.Name)
}

// releaseIfOurs releases the tenant's Lease as it is now, if this replica
// still holds it (it went on renewing it while the tenant stopped).
func (l *leases) releaseIfOurs(ctx context.Context, tenant string) error {
	cur, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, LeaseName(tenant), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return wrap(err, "reading the Lease of tenant %s", tenant)
	}
	if ptr.Deref(cur.Spec.HolderIdentity, "") != l.self {
		return nil
	}
	return l.release(ctx, cur)
}

// forgetIfOurs deletes the Lease of a removed tenant as it is now, if this
// replica holds it or it has expired.
func (l *leases) forgetIfOurs(ctx context.Context, tenant string) error {
	cur, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, LeaseName(tenant), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return wrap(err, "reading the Lease of tenant %s", tenant)
	}
	if c := claimOf(cur); c.Holder != l.self && c.live(l.now()) {
		return nil
	}
	return l.forget(ctx, cur)
}

// hold makes lease this replica's, renewed now.
func (l *leases) hold(lease *coordinationv1.Lease, cluster string) {
	now := metav1.NewMicroTime(l.now())
	lease.Spec.HolderIdentity = ptr.To(l.self)
	lease.Spec.RenewTime = &now
	lease.Spec.LeaseDurationSeconds = ptr.To(int32((l.duration + time.Second - 1) / time.Second))
	if cluster != "" {
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[AnnotationCluster] = cluster
	}
}

func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(strings.TrimSpace(fmt.Sprintf(format, args...))+": %w", err)
}
