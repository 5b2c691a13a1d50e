package service

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// reclaim deletes the load balancer this Outrigger made for a Service that
// is no longer of its class: the class changed (through a type change, the
// only way the API server lets it change), perhaps while Outrigger was
// down, so memory cannot be trusted to know. The finalizer (upstream's name,
// shared by every CCM) says only that some CCM provisioned the Service, and
// a load balancer under the Service's name may be another CCM's on the same
// cloud: the proof is the ownership record the provider keeps in the cloud
// (provider.LoadBalancerOwnership), naming this cluster, this Service object
// and this Outrigger's class. Without that record, only what this process
// remembers making is reclaimed.
func (r *reconciler) reclaim(ctx context.Context, svc *corev1.Service) error {
	key := client.ObjectKeyFromObject(svc)
	last, remembered := r.memory.last(key)
	remembered = remembered && last.service.UID == svc.UID
	if !remembered && (!slices.Contains(svc.Finalizers, Finalizer) || r.memory.checkedNotOurs(svc.UID)) {
		return nil
	}
	ours, err := r.madeHere(ctx, svc, remembered)
	if err != nil {
		return r.syncFailed(svc, fmt.Errorf("failed to check for a load balancer made before the Service's class changed: %w", err))
	}
	if !ours {
		r.memory.notOursFound(key, svc.UID)
		return nil
	}
	klog.FromContext(ctx).Info("Service no longer of this class has a load balancer made by this controller; deleting it",
		"service", key, "class", ptr.Deref(svc.Spec.LoadBalancerClass, ""), "ownClass", r.opts.Class)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		// Nobody else will: delete, clear the status, drop the finalizer.
		return r.cleanup(ctx, svc)
	}
	// Another class's controller owns the Service now, its status and the
	// finalizer with it: only the load balancer is ours.
	r.recorder.Eventf(svc, corev1.EventTypeNormal, EventDeleting, "Deleting load balancer: the Service's class is now %q", ptr.Deref(svc.Spec.LoadBalancerClass, ""))
	if err := r.opts.LoadBalancer.EnsureLoadBalancerDeleted(ctx, r.opts.ClusterName, svc); err != nil && !elsewhere(err) {
		return r.syncFailed(svc, fmt.Errorf("failed to delete the load balancer made before the Service's class changed: %w", err))
	}
	r.memory.forget(key)
	r.recorder.Event(svc, corev1.EventTypeNormal, EventDeleted, "Deleted load balancer")
	return nil
}

// madeHere reports whether the cloud holds a load balancer this Outrigger
// made for svc: by the provider's ownership record when it keeps one, else
// only when this process remembers making it. A load balancer merely
// existing under the Service's name proves nothing.
func (r *reconciler) madeHere(ctx context.Context, svc *corev1.Service, remembered bool) (bool, error) {
	if owners, ok := r.opts.LoadBalancer.(provider.LoadBalancerOwnership); ok {
		owner, exists, err := owners.LoadBalancerOwner(ctx, r.opts.ClusterName, svc)
		switch {
		case elsewhere(err):
			return false, nil
		case err != nil:
			return false, err
		}
		return exists && owner.Owns(r.opts.ClusterName, svc.UID, r.opts.Class), nil
	}
	if !remembered {
		klog.FromContext(ctx).V(2).Info("Service of another class carries the load balancer finalizer; the provider keeps no ownership record, so its load balancer is left alone",
			"service", klog.KObj(svc), "class", ptr.Deref(svc.Spec.LoadBalancerClass, ""))
		return false, nil
	}
	_, exists, err := r.opts.LoadBalancer.GetLoadBalancer(ctx, r.opts.ClusterName, svc)
	if elsewhere(err) {
		return false, nil
	}
	return exists, err
}

// ownLoadBalancerExists reports whether the cloud holds a load balancer of
// this Outrigger's for svc, which cleanup may delete, and whether it holds
// one another CCM made for svc, whose cleanup is that CCM's. With a provider that
// keeps ownership records it must name this cluster, this Service object
// and this Outrigger's class: a Service that left another CCM's class (a
// type change clears the class) is cleaned up by both, and the load
// balancer under its name may be the other CCM's, made again since for the
// Service back in its class. Without records, it is the load balancer under
// the Service's name, as upstream does.
func (r *reconciler) ownLoadBalancerExists(ctx context.Context, svc *corev1.Service) (ours, theirs bool, err error) {
	if owners, ok := r.opts.LoadBalancer.(provider.LoadBalancerOwnership); ok {
		owner, exists, err := owners.LoadBalancerOwner(ctx, r.opts.ClusterName, svc)
		if err != nil || !exists {
			return false, false, err
		}
		// Another cluster's load balancer under the name is not this
		// Service's at all; another class's, for this Service, is.
		ours = owner.Owns(r.opts.ClusterName, svc.UID, r.opts.Class)
		theirs = !ours && owner.ClusterName == r.opts.ClusterName && owner.ServiceUID == svc.UID
		if theirs {
			klog.FromContext(ctx).V(2).Info("Cleanup leaves the load balancer of another class alone, and the finalizer for its CCM", "service", klog.KObj(svc), "class", owner.Class, "ownClass", r.opts.Class)
		}
		return ours, theirs, nil
	}
	_, exists, err := r.opts.LoadBalancer.GetLoadBalancer(ctx, r.opts.ClusterName, svc)
	return exists, false, err
}
