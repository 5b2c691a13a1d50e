package service

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// EventOrphanDeleted is recorded on the namespace of a Service that no
// longer exists when the orphan sweep deleted its load balancer.
const EventOrphanDeleted = "DeletedOrphanLoadBalancer"

// orphanSweep finds the load balancers the cloud records as made for this
// cluster and this Outrigger's class whose Service (by UID) no longer
// exists, and deletes them once they have been seen orphaned for a grace
// period. Such a load balancer is left by a Service that vanished while
// Outrigger was down (its finalizer removed by hand, or the Service
// recreated under the same name, a new object): the finalizer and the
// controller's memory both missed it. A load balancer is this cluster's only
// when its record carries this cluster's identity: clusters left at the
// same --cluster-name (most are "kubernetes") and records made before the
// identity (the upstream CCM's, say) are never deleted here.
type orphanSweep struct {
	client   client.Reader
	owners   provider.LoadBalancerOwnership
	lb       cloudprovider.LoadBalancer
	recorder record.EventRecorder
	// tenant labels the sweep's metrics.
	tenant    string
	cluster   string
	clusterID func() string
	class     string
	period    time.Duration
	// seen is when each load balancer was first seen orphaned: a cache,
	// rebuilt after a restart by waiting the grace period again.
	seen map[string]time.Time
	now  func() time.Time
}

func (s *orphanSweep) NeedLeaderElection() bool { return true }

// Start sweeps every period until ctx ends.
func (s *orphanSweep) Start(ctx context.Context) error {
	// The tenant's series exist from the start, at 0, as a plain counter's
	// do: a dashboard or alert reading them is not left without data.
	orphansDeletedTotal.WithLabelValues(s.tenant)
	wait.UntilWithContext(ctx, s.sweep, s.period)
	return nil
}

// sweep is one pass; the grace period is one sweep period.
func (s *orphanSweep) sweep(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("orphan-sweep")
	id := ""
	if s.clusterID != nil {
		id = s.clusterID()
	}
	if id == "" {
		orphanSweepsTotal.WithLabelValues(s.tenant, "no_identity").Inc()
		log.V(2).Info("The cluster's identity is not known: deleting nothing this period")
		return
	}
	owned, err := s.owners.ListLoadBalancerOwners(ctx, s.cluster)
	if err != nil {
		orphanSweepsTotal.WithLabelValues(s.tenant, "failed").Inc()
		log.Error(err, "Listing this cluster's load balancers; trying again next period")
		return
	}
	var services corev1.ServiceList
	if err := s.client.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
		orphanSweepsTotal.WithLabelValues(s.tenant, "failed").Inc()
		log.Error(err, "Listing Services; trying again next period")
		return
	}
	orphanSweepsTotal.WithLabelValues(s.tenant, "swept").Inc()
	exists := make(map[types.UID]bool, len(services.Items))
	for i := range services.Items {
		exists[services.Items[i].UID] = true
	}
	now := s.now()
	listed := make(map[string]bool, len(owned))
	for _, o := range owned {
		listed[o.Name] = true
		if o.ClusterName != s.cluster || !o.OfCluster(id) || o.ServiceUID == "" || o.Class != s.class || exists[o.ServiceUID] {
			delete(s.seen, o.Name)
			continue
		}
		first, ok := s.seen[o.Name]
		if !ok {
			s.seen[o.Name] = now
			log.V(2).Info("Load balancer whose Service no longer exists; deleting it after the grace period", "loadBalancer", o.Name,
				"service", o.ServiceNamespace+"/"+o.ServiceName, "uid", o.ServiceUID, "grace", s.period)
			continue
		}
		if now.Sub(first) < s.period {
			continue
		}
		if err := s.delete(ctx, o); err != nil {
			log.Error(err, "Deleting a load balancer whose Service no longer exists; trying again next period", "loadBalancer", o.Name)
			continue
		}
		delete(s.seen, o.Name)
		orphansDeletedTotal.WithLabelValues(s.tenant).Inc()
		log.Info("Deleted a load balancer whose Service no longer exists", "loadBalancer", o.Name,
			"service", o.ServiceNamespace+"/"+o.ServiceName, "uid", o.ServiceUID)
		if o.ServiceNamespace != "" {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.ServiceNamespace}}
			s.recorder.Eventf(ns, corev1.EventTypeNormal, EventOrphanDeleted,
				"Deleted load balancer %s of Service %s (uid %s), which no longer exists", o.Name, o.ServiceName, o.ServiceUID)
		}
	}
	for name := range s.seen {
		if !listed[name] {
			delete(s.seen, name)
		}
	}
}

// delete asks the provider to delete the load balancer through the
// standard call, with the Service as it was made for (its UID, which the
// name derives from) and as one that no longer wants a load balancer.
func (s *orphanSweep) delete(ctx context.Context, o provider.OwnedLoadBalancer) error {
	gone := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.ServiceNamespace, Name: o.ServiceName, UID: o.ServiceUID},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP},
	}
	if o.Class != "" {
		gone.Spec.LoadBalancerClass = ptr.To(o.Class)
	}
	if err := s.lb.EnsureLoadBalancerDeleted(ctx, s.cluster, gone); err != nil && !elsewhere(err) {
		return fmt.Errorf("deleting load balancer %s: %w", o.Name, err)
	}
	return nil
}
