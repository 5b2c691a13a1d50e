package gateway

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// A provider that refuses a load balancer for one of its listener
// protocols (many clouds have no UDP load balancers) would leave every
// listener of a Gateway unserved. The refusal is recorded on the
// Gateway's load balancer Service, for the Gateway's generation: that
// protocol's listeners are then not accepted (UnsupportedProtocol, the
// provider's words), and the load balancer is made for the others. A new
// generation of the Gateway tries the protocol again.
const (
	refusedProtocolAnnotation   = "gateway.outrigger.dev/refused-protocol"
	refusedGenerationAnnotation = "gateway.outrigger.dev/refused-generation"
	refusedMessageAnnotation    = "gateway.outrigger.dev/refused-message"
)

// refusedProtocols reads what the provider refused for this generation of
// the Gateway from its load balancer Service.
func (r *reconciler) refusedProtocols(ctx context.Context, gw *gwv1.Gateway) (map[corev1.Protocol]string, error) {
	var svc corev1.Service
	if err := r.client.Get(ctx, r.key(gw), &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Service %s: %w", r.key(gw), err)
	}
	a := svc.Annotations
	if !owned(&svc, gw) || a[refusedProtocolAnnotation] == "" || a[refusedGenerationAnnotation] != strconv.FormatInt(gw.Generation, 10) {
		return nil, nil
	}
	return map[corev1.Protocol]string{corev1.Protocol(a[refusedProtocolAnnotation]): a[refusedMessageAnnotation]}, nil
}

// recordRefusal notes on svc that the provider refused its UDP ports,
// when the provider refused a load balancer with both TCP and UDP ports as
// invalid and no refusal is recorded yet: it says whether it did (the
// Gateway is then compiled again without its UDP listeners).
func (r *reconciler) recordRefusal(ctx context.Context, gw *gwv1.Gateway, svc *corev1.Service, refused map[corev1.Protocol]string) (bool, error) {
	if svc == nil || len(refused) > 0 {
		return false, nil
	}
	lb := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady)
	if lb == nil || lb.Status != metav1.ConditionFalse || lb.Reason != provider.ReasonInvalidSpec || lb.ObservedGeneration != svc.Generation {
		return false, nil
	}
	hasProtocol := func(p corev1.Protocol) bool {
		return slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Protocol == p })
	}
	if !hasProtocol(corev1.ProtocolTCP) || !hasProtocol(corev1.ProtocolUDP) {
		return false, nil
	}
	patch := client.MergeFrom(svc.DeepCopy())
	if svc.Annotations == nil {
		svc.Annotations = map[string]string{}
	}
	svc.Annotations[refusedProtocolAnnotation] = string(corev1.ProtocolUDP)
	svc.Annotations[refusedGenerationAnnotation] = strconv.FormatInt(gw.Generation, 10)
	svc.Annotations[refusedMessageAnnotation] = lb.Message
	if err := r.client.Patch(ctx, svc, patch); err != nil {
		return false, fmt.Errorf("recording the provider's refusal on Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed",
		"The provider refused a load balancer with UDP listeners (%s); serving the other listeners without them", lb.Message)
	return true, nil
}
