package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// applied remembers, per Gateway UID, the digest of what the cloud's
// load balancer was last given successfully: a Gateway reconciled again
// with nothing changed for the cloud (its own status written, a route
// elsewhere changed) costs no cloud call. It is lost on restart, when
// every Gateway is ensured once, as every Service is.
type applied struct {
	mu sync.Mutex
	m  map[types.UID]string
}

func (a *applied) get(uid types.UID) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[uid]
}

func (a *applied) set(uid types.UID, digest string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if digest == "" {
		delete(a.m, uid)
		return
	}
	if a.m == nil {
		a.m = map[types.UID]string{}
	}
	a.m[uid] = digest
}

// cloudGateway is the Gateway as the provider's layer-7 load balancer is
// given it.
func (r *reconciler) cloudGateway(gw *gwv1.Gateway, res *result) *provider.Gateway {
	g := &provider.Gateway{
		Namespace: gw.Namespace,
		Name:      gw.Name,
		UID:       gw.UID,
		Class:     r.opts.LoadBalancerClass,
	}
	if r.opts.ClusterID != nil {
		g.ClusterID = r.opts.ClusterID()
	}
	for _, a := range gw.Spec.Addresses {
		g.Addresses = append(g.Addresses, a.Value)
	}
	if inf := gw.Spec.Infrastructure; inf != nil && len(inf.Annotations) > 0 {
		g.Annotations = map[string]string{}
		for k, v := range inf.Annotations {
			g.Annotations[string(k)] = string(v)
		}
	}
	if res != nil {
		cfg := res.config
		g.Config = &cfg
	}
	return g
}

// reconcileCloud serves an accepted Gateway with the provider's own
// layer-7 load balancer: no data plane, no load balancer Service.
func (r *reconciler) reconcileCloud(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) (reconcile.Result, error) {
	// What this Gateway had from Outrigger's data plane before the
	// provider offered its own goes first.
	if gone, err := r.deleteDataPlane(ctx, gw); err != nil || !gone {
		return reconcile.Result{}, err
	}
	f := front{}
	var callErr error
	if len(res.ports) == 0 {
		// Not accepted, or no valid listener: no load balancer is kept.
		if len(gw.Status.Addresses) > 0 || r.applied.get(gw.UID) != "" {
			if err := r.deleteCloud(ctx, gw); err != nil {
				return reconcile.Result{}, err
			}
		}
	} else {
		f.exists = true
		f.ingress, callErr = r.ensureCloud(ctx, gw, res)
		if callErr != nil {
			f.waiting = fmt.Sprintf("%s: %v", refusedPrefix, callErr)
		}
	}
	if err := r.writeRouteStatuses(ctx, gw, w, res); err != nil {
		return reconcile.Result{}, err
	}
	programmed, err := r.writeGatewayStatus(ctx, gw, res, f)
	if err != nil {
		return reconcile.Result{}, err
	}
	if callErr != nil {
		// Retried with the controller's backoff: a quota freed or a
		// throttle passed may let it through.
		return reconcile.Result{}, fmt.Errorf("ensuring the cloud's load balancer of Gateway %s/%s: %w", gw.Namespace, gw.Name, callErr)
	}
	ctrl.FromContext(ctx).V(4).Info("Gateway reconciled", "programmed", programmed)
	return recheck(gw, w), nil
}

// ensureCloud calls EnsureGatewayLoadBalancer when what the cloud is given
// changed since its last success, and returns the load balancer's
// addresses (the Gateway's status keeps them in between).
func (r *reconciler) ensureCloud(ctx context.Context, gw *gwv1.Gateway, res *result) ([]corev1.LoadBalancerIngress, error) {
	want := r.cloudGateway(gw, res)
	b, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("encoding Gateway %s/%s for the provider: %w", gw.Namespace, gw.Name, err)
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	if r.applied.get(gw.UID) == digest && len(gw.Status.Addresses) > 0 {
		var ingress []corev1.LoadBalancerIngress
		for _, a := range gw.Status.Addresses {
			if a.Type != nil && *a.Type == gwv1.HostnameAddressType {
				ingress = append(ingress, corev1.LoadBalancerIngress{Hostname: a.Value})
			} else {
				ingress = append(ingress, corev1.LoadBalancerIngress{IP: a.Value})
			}
		}
		return ingress, nil
	}
	r.recorder.Event(gw, corev1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer")
	st, err := r.opts.Cloud.EnsureGatewayLoadBalancer(ctx, r.opts.ClusterName, want)
	if err != nil {
		r.applied.set(gw.UID, "")
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
		return nil, err
	}
	r.applied.set(gw.UID, digest)
	r.recorder.Event(gw, corev1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer")
	if st == nil {
		return nil, nil
	}
	return st.Ingress, nil
}

// deleteCloud deletes the Gateway's load balancer in the cloud; the
// provider deletes only one whose record names this cluster and Gateway.
func (r *reconciler) deleteCloud(ctx context.Context, gw *gwv1.Gateway) error {
	r.recorder.Event(gw, corev1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
	if err := r.opts.Cloud.EnsureGatewayLoadBalancerDeleted(ctx, r.opts.ClusterName, r.cloudGateway(gw, nil)); err != nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "DeleteLoadBalancerFailed", "Error deleting load balancer: %v", err)
		return fmt.Errorf("deleting the cloud's load balancer of Gateway %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	r.applied.set(gw.UID, "")
	r.recorder.Event(gw, corev1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	return nil
}
