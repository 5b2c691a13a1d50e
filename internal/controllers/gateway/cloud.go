package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

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

// cloudServing serves a Gateway with the provider's own layer-7 load
// balancer (provider.Gateways), through the cloud-call layer: no data
// plane, no load balancer Service.
type cloudServing struct {
	r  *reconciler
	lb provider.GatewayLoadBalancer
	// applied is what lb was last given, per Gateway.
	applied applied
}

// setup adds nothing: the cloud's load balancers need no namespace.
func (s *cloudServing) setup(ctrl.Manager) error { return nil }

// refused is none: the provider refuses a whole load balancer, whose
// error the Gateway's status carries.
func (s *cloudServing) refused(context.Context, *gwv1.Gateway) (map[corev1.Protocol]string, error) {
	return nil, nil
}

// serve serves an accepted Gateway with the provider's own load balancer.
func (s *cloudServing) serve(ctx context.Context, gw *gwv1.Gateway, _ *world, res *result) (front, error) {
	// What this Gateway had from Outrigger's data plane before the
	// provider offered its own goes first.
	if gone, err := s.r.deleteDataPlane(ctx, gw); err != nil || !gone {
		return front{wait: true}, err
	}
	f := front{}
	if len(res.ports) == 0 {
		// Not accepted, or no valid listener: no load balancer is kept.
		if len(gw.Status.Addresses) > 0 || s.applied.get(gw.UID) != "" {
			if err := s.deleteCloud(ctx, gw); err != nil {
				return front{}, err
			}
		}
		return f, nil
	}
	f.exists = true
	ingress, err := s.ensureCloud(ctx, gw, res)
	f.ingress = ingress
	if err != nil {
		f.waiting = fmt.Sprintf("%s: %v", refusedPrefix, err)
		// Retried with the controller's backoff: a quota freed or a
		// throttle passed may let it through.
		f.retry = fmt.Errorf("ensuring the cloud's load balancer of Gateway %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	return f, nil
}

// keep leaves the cloud's load balancer as it is: no call is made, and the
// addresses the Gateway shows stay.
func (s *cloudServing) keep(_ context.Context, gw *gwv1.Gateway, invalid string) (front, error) {
	f := front{invalid: invalid, exists: len(gw.Status.Addresses) > 0 || s.applied.get(gw.UID) != ""}
	for _, a := range gw.Status.Addresses {
		if a.Type != nil && *a.Type == gwv1.HostnameAddressType {
			f.ingress = append(f.ingress, corev1.LoadBalancerIngress{Hostname: a.Value})
		} else {
			f.ingress = append(f.ingress, corev1.LoadBalancerIngress{IP: a.Value})
		}
	}
	return f, nil
}

// supported are the features of fs the provider's load balancers serve.
func (s *cloudServing) supported(fs []features.FeatureName) []features.FeatureName {
	served := s.lb.GatewayFeatures()
	var out []features.FeatureName
	for _, f := range fs {
		if slices.Contains(served, string(f)) {
			out = append(out, f)
		}
	}
	return out
}

// remove deletes what the Gateway had from Outrigger's data plane, if
// anything, then the cloud's load balancer.
func (s *cloudServing) remove(ctx context.Context, gw *gwv1.Gateway) (bool, error) {
	if gone, err := s.r.deleteDataPlane(ctx, gw); err != nil || !gone {
		return false, err
	}
	if err := s.deleteCloud(ctx, gw); err != nil {
		return false, err
	}
	return true, nil
}

// cloudGateway is the Gateway as the provider's layer-7 load balancer is
// given it.
func (s *cloudServing) cloudGateway(gw *gwv1.Gateway, res *result) *provider.Gateway {
	g := &provider.Gateway{
		Namespace: gw.Namespace,
		Name:      gw.Name,
		UID:       gw.UID,
		Class:     s.r.opts.LoadBalancerClass,
	}
	if s.r.opts.ClusterID != nil {
		g.ClusterID = s.r.opts.ClusterID()
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

// ensureCloud calls EnsureGatewayLoadBalancer when what the cloud is given
// changed since its last success, and returns the load balancer's
// addresses (the Gateway's status keeps them in between).
func (s *cloudServing) ensureCloud(ctx context.Context, gw *gwv1.Gateway, res *result) ([]corev1.LoadBalancerIngress, error) {
	want := s.cloudGateway(gw, res)
	b, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("encoding Gateway %s/%s for the provider: %w", gw.Namespace, gw.Name, err)
	}
	sum := sha256.Sum256(b)
	digest := hex.EncodeToString(sum[:])
	if s.applied.get(gw.UID) == digest && len(gw.Status.Addresses) > 0 {
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
	s.r.recorder.Event(gw, corev1.EventTypeNormal, "EnsuringLoadBalancer", "Ensuring load balancer")
	st, err := s.lb.EnsureGatewayLoadBalancer(ctx, s.r.opts.ClusterName, want)
	if err != nil {
		s.applied.set(gw.UID, "")
		s.r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing load balancer: %v", err)
		return nil, err
	}
	s.applied.set(gw.UID, digest)
	s.r.recorder.Event(gw, corev1.EventTypeNormal, "EnsuredLoadBalancer", "Ensured load balancer")
	if st == nil {
		return nil, nil
	}
	return st.Ingress, nil
}

// deleteCloud deletes the Gateway's load balancer in the cloud; the
// provider deletes only one whose record names this cluster and Gateway.
func (s *cloudServing) deleteCloud(ctx context.Context, gw *gwv1.Gateway) error {
	s.r.recorder.Event(gw, corev1.EventTypeNormal, "DeletingLoadBalancer", "Deleting load balancer")
	if err := s.lb.EnsureGatewayLoadBalancerDeleted(ctx, s.r.opts.ClusterName, s.cloudGateway(gw, nil)); err != nil {
		s.r.recorder.Eventf(gw, corev1.EventTypeWarning, "DeleteLoadBalancerFailed", "Error deleting load balancer: %v", err)
		return fmt.Errorf("deleting the cloud's load balancer of Gateway %s/%s: %w", gw.Namespace, gw.Name, err)
	}
	s.applied.set(gw.UID, "")
	s.r.recorder.Event(gw, corev1.EventTypeNormal, "DeletedLoadBalancer", "Deleted load balancer")
	return nil
}
