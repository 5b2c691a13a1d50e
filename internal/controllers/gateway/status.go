package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/apilimits"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
)

// front is what serves a Gateway's addresses, as the status tells it: a
// load balancer Service with Outrigger's data plane behind it, or the
// cloud's own layer-7 load balancer.
type front struct {
	// exists: something is made to serve the Gateway (it has a valid
	// listener).
	exists  bool
	ingress []corev1.LoadBalancerIngress
	// waiting says why there is no address yet; a provider's refusal
	// starts with refusedPrefix.
	waiting string
	// pending says why the addresses do not serve yet ("" they do).
	pending string
	// invalid says why what was compiled cannot be served ("" it can).
	invalid string
	// wait: what serves the Gateway changed, and its watch brings the
	// Gateway back; no status is written now.
	wait bool
	// retry is the provider's refusal, returned once the statuses say it,
	// so that the controller's backoff tries again (a quota freed, a
	// throttle passed).
	retry error
}

// refusedPrefix starts the Programmed message of a Gateway whose load
// balancer the provider refused; such a message is also a Warning Event.
const refusedPrefix = "the provider did not make the load balancer"

// serviceFront is the state of a Gateway served by Outrigger's data plane
// behind svc (nil: none).
func serviceFront(svc *corev1.Service, dataPlaneReady bool) front {
	if svc == nil {
		return front{}
	}
	f := front{exists: true, ingress: svc.Status.LoadBalancer.Ingress}
	f.waiting = fmt.Sprintf("waiting for the load balancer of Service %s/%s", svc.Namespace, svc.Name)
	// The provider's refusal (a quota, a protocol it lacks) is on the
	// Service; the Gateway says it too.
	if lb := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady); lb != nil &&
		lb.Status == metav1.ConditionFalse && lb.Reason != service.ConditionReasonProvisioning {
		f.waiting = fmt.Sprintf("%s of Service %s/%s: %s: %s", refusedPrefix, svc.Namespace, svc.Name, lb.Reason, lb.Message)
	}
	if !dataPlaneReady {
		f.pending = fmt.Sprintf("waiting for the data plane Deployment %s/%s to be available", svc.Namespace, svc.Name)
	}
	return f
}

// writeGatewayStatus writes addresses, conditions and listeners; it says
// whether the Gateway is programmed.
func (r *reconciler) writeGatewayStatus(ctx context.Context, gw *gwv1.Gateway, res *result, f front) (bool, error) {
	orig := gw.DeepCopy()
	var addrs []gwv1.GatewayStatusAddress
	for _, in := range f.ingress {
		switch {
		case in.IP != "":
			addrs = append(addrs, gwv1.GatewayStatusAddress{Type: ptrTo(gwv1.IPAddressType), Value: in.IP})
		case in.Hostname != "":
			addrs = append(addrs, gwv1.GatewayStatusAddress{Type: ptrTo(gwv1.HostnameAddressType), Value: in.Hostname})
		}
	}
	// The addresses are the provider's answer: what the Gateway CRD would
	// refuse (a 17th address, a malformed one) is left out, so the rest
	// of the status is still written.
	addrs, refused := apilimits.GatewayAddresses(addrs)
	if len(refused) > 0 {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "ProviderAnswerRefused", "Left out of status.addresses what the API does not accept from provider %s: %s",
			r.opts.Provider, apilimits.Summary(refused))
	}
	gen := gw.Generation
	requested := requestedAddresses(gw)
	programmed := cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed), "", gen)
	switch {
	case res.accepted.Status == metav1.ConditionFalse:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "not accepted: "+res.accepted.Message, gen)
	case f.invalid != "":
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), f.invalid, gen)
	case !f.exists:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no valid listener", gen)
	case len(requested) > 1:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable),
			fmt.Sprintf("a load balancer takes one requested address (the Service's loadBalancerIP); %d were requested: %s", len(requested), strings.Join(requested, ", ")), gen)
	case len(addrs) == 0:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned), f.waiting, gen)
	case f.pending != "":
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonPending), f.pending, gen)
	case len(requested) == 1 && !slices.ContainsFunc(addrs, func(a gwv1.GatewayStatusAddress) bool { return a.Value == requested[0] }):
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable),
			fmt.Sprintf("the provider gave %s, not the requested %s", addrs[0].Value, requested[0]), gen)
	}
	gw.Status.Addresses = addrs
	setCondition(&gw.Status.Conditions, res.accepted)
	setCondition(&gw.Status.Conditions, programmed)
	if res.resolvedRefs.Type != "" {
		setCondition(&gw.Status.Conditions, res.resolvedRefs)
	}
	if res.insecureFrontend {
		setCondition(&gw.Status.Conditions, cond(string(gwv1.GatewayConditionInsecureFrontendValidationMode), true, string(gwv1.GatewayReasonConfigurationChanged),
			"a client validation is AllowInsecureFallback: clients without a valid certificate are served", gen))
	} else {
		meta.RemoveStatusCondition(&gw.Status.Conditions, string(gwv1.GatewayConditionInsecureFrontendValidationMode))
	}
	gw.Status.Listeners = listenerStatuses(orig.Status.Listeners, res.listeners, programmed.Status == metav1.ConditionTrue)
	if r.opts.ListenerSet {
		gw.Status.AttachedListenerSets = &res.attachedSets
	}
	if equality.Semantic.DeepEqual(orig.Status, gw.Status) {
		return programmed.Status == metav1.ConditionTrue, nil
	}
	if err := r.client.Status().Patch(ctx, gw, client.MergeFrom(orig)); err != nil {
		return false, fmt.Errorf("writing Gateway status: %w", err)
	}
	wasProgrammed := meta.IsStatusConditionTrue(orig.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	if programmed.Status == metav1.ConditionTrue && !wasProgrammed {
		r.recorder.Eventf(gw, corev1.EventTypeNormal, "Programmed", "Gateway programmed at %s", addrs[0].Value)
	}
	if prev := meta.FindStatusCondition(orig.Status.Conditions, programmed.Type); programmed.Status == metav1.ConditionFalse &&
		strings.HasPrefix(programmed.Message, refusedPrefix) && (prev == nil || prev.Message != programmed.Message) {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "%s", programmed.Message)
	}
	if prev := meta.FindStatusCondition(orig.Status.Conditions, programmed.Type); f.invalid != "" && (prev == nil || prev.Message != programmed.Message) {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "%s", programmed.Message)
	}
	if res.accepted.Status == metav1.ConditionFalse && meta.FindStatusCondition(orig.Status.Conditions, res.accepted.Type) == nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, res.accepted.Reason, "Gateway not accepted: %s", res.accepted.Message)
	}
	return programmed.Status == metav1.ConditionTrue, nil
}

// listenerStatuses are compiled listener statuses as written: the
// transition times of conditions that did not change kept, and Programmed
// pending while the Gateway is not programmed.
func listenerStatuses(prev, compiled []gwv1.ListenerStatus, gatewayProgrammed bool) []gwv1.ListenerStatus {
	out := make([]gwv1.ListenerStatus, 0, len(compiled))
	for _, ls := range compiled {
		var conds []metav1.Condition
		for _, old := range prev {
			if old.Name == ls.Name {
				conds = slices.Clone(old.Conditions)
			}
		}
		for _, c := range ls.Conditions {
			if c.Type == string(gwv1.ListenerConditionProgrammed) && c.Status == metav1.ConditionTrue && !gatewayProgrammed {
				c = cond(c.Type, false, string(gwv1.ListenerReasonPending), "waiting for the load balancer", c.ObservedGeneration)
			}
			setCondition(&conds, c)
		}
		conds = slices.DeleteFunc(conds, func(c metav1.Condition) bool {
			return !slices.ContainsFunc(ls.Conditions, func(n metav1.Condition) bool { return n.Type == c.Type })
		})
		ls.Conditions = conds
		out = append(out, ls)
	}
	return out
}

// setCondition sets a condition, keeping its transition time when its
// status did not change.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	meta.SetStatusCondition(conds, c)
}

// writeRouteStatuses writes this Gateway's parent entries on every route
// that names it (or did), leaving other controllers' entries alone.
func (r *reconciler) writeRouteStatuses(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) error {
	var errs []error
	update := func(o client.Object, parents *[]gwv1.RouteParentStatus, kind string) {
		key := routeKey{kind: kind, name: client.ObjectKeyFromObject(o)}
		want := res.routeParents[key]
		before := slices.Clone(*parents)
		var next []gwv1.RouteParentStatus
		for _, p := range *parents {
			if p.ControllerName == r.opts.ControllerName && (w.isParent(p.ParentRef, o.GetNamespace()) || w.goneSet(p.ParentRef, o.GetNamespace())) {
				continue // replaced below
			}
			next = append(next, p)
		}
		for _, np := range want {
			// Keep transition times of unchanged conditions.
			var conds []metav1.Condition
			for _, old := range before {
				if old.ControllerName == np.ControllerName && equality.Semantic.DeepEqual(old.ParentRef, np.ParentRef) {
					conds = slices.Clone(old.Conditions)
				}
			}
			for _, c := range np.Conditions {
				setCondition(&conds, c)
			}
			np.Conditions = conds
			next = append(next, np)
		}
		if equality.Semantic.DeepEqual(before, next) {
			return
		}
		if next == nil {
			next = []gwv1.RouteParentStatus{}
		}
		*parents = next
		if err := r.client.Status().Update(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("writing status of %s %s: %w", kind, key.name, err))
			return
		}
		for _, np := range want {
			for _, c := range np.Conditions {
				if c.Status == metav1.ConditionFalse {
					r.recorder.Eventf(o, corev1.EventTypeWarning, c.Reason, "%s %s: %s", gw.Name, c.Type, c.Message)
				}
			}
		}
	}
	for _, rt := range w.routes {
		o := rt.obj.DeepCopyObject().(client.Object)
		update(o, rt.kind.parentStatuses(o), rt.kind.name)
	}
	return errors.Join(errs...)
}
