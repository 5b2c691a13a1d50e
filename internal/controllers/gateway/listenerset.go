package gateway

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ListenerSets (GEP-1713) let other teams add listeners to a Gateway
// that allows them (spec.allowedListeners, None unless set). Their
// listeners are compiled with the Gateway's own, after them, in the
// order the specification ranks them (the Gateway's listeners first, then
// the ListenerSets oldest first, then by namespace/name), so a listener
// conflicting with one of higher rank is the one refused. A listener of a
// ListenerSet is the ListenerSet's in every way a namespace matters: its
// certificates are read from the ListenerSet's namespace (or granted to
// kind ListenerSet there), and its allowedRoutes Same means the
// ListenerSet's namespace. Routes attach to it through a parentRef of
// kind ListenerSet only; a parentRef to the Gateway selects the
// Gateway's own listeners.

const kindListenerSet = "ListenerSet"

// setState is one ListenerSet that names the Gateway, as compiled.
type setState struct {
	obj *gwv1.ListenerSet
	// notAllowed says why the Gateway does not take it ("" when it
	// does): its listeners are then neither compiled nor attachable.
	notAllowed string
	listeners  []*listenerState
}

// setNames says whether a ListenerSet's parentRef names gw.
func setNames(set *gwv1.ListenerSet, gw *gwv1.Gateway) bool {
	key, ok := setParentKey(set)
	return ok && key == types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
}

// setParentKey is the Gateway a ListenerSet's parentRef names; false
// when it names another kind.
func setParentKey(set *gwv1.ListenerSet) (types.NamespacedName, bool) {
	ref := set.Spec.ParentRef
	if ref.Group != nil && *ref.Group != groupGateway || ref.Kind != nil && *ref.Kind != kindGateway {
		return types.NamespacedName{}, false
	}
	ns := set.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// setAllowed says why the Gateway's allowedListeners does not take set,
// or "" when it does.
func setAllowed(w *world, set *gwv1.ListenerSet) string {
	gw := w.gateway
	from := gwv1.NamespacesFromNone
	var sel *metav1.LabelSelector
	if al := gw.Spec.AllowedListeners; al != nil && al.Namespaces != nil {
		if al.Namespaces.From != nil {
			from = *al.Namespaces.From
		}
		sel = al.Namespaces.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return ""
	case gwv1.NamespacesFromSame:
		if set.Namespace == gw.Namespace {
			return ""
		}
		return fmt.Sprintf("Gateway %s/%s takes ListenerSets of its own namespace only", gw.Namespace, gw.Name)
	case gwv1.NamespacesFromSelector:
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || sel == nil {
			return fmt.Sprintf("Gateway %s/%s has no valid allowedListeners selector", gw.Namespace, gw.Name)
		}
		if n, ok := w.namespaces[set.Namespace]; ok && s.Matches(labels.Set(n.Labels)) {
			return ""
		}
		return fmt.Sprintf("namespace %s is not selected by Gateway %s/%s's allowedListeners", set.Namespace, gw.Namespace, gw.Name)
	}
	return fmt.Sprintf("Gateway %s/%s allows no ListenerSets (spec.allowedListeners)", gw.Namespace, gw.Name)
}

// setPrecedence ranks ListenerSets: the oldest first, then by
// namespace/name.
func setPrecedence(a, b *gwv1.ListenerSet) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
}

// entryListener is a ListenerSet's entry as a Gateway listener: the same
// fields.
func entryListener(e gwv1.ListenerEntry) gwv1.Listener {
	return gwv1.Listener(e)
}

// setResult is a ListenerSet's status as compiled; Programmed is decided
// when the Gateway's is (writeListenerSetStatuses).
type setResult struct {
	key       types.NamespacedName
	accepted  metav1.Condition
	listeners []gwv1.ListenerStatus
}

// attached says whether the ListenerSet counts in the Gateway's
// attachedListenerSets: allowed and with a valid listener.
func (s setResult) attached() bool { return s.accepted.Status == metav1.ConditionTrue }

// detachedSets are the ListenerSets naming a Gateway being deleted, as
// they are left: not accepted, their listeners no longer served, so
// nothing reads them as attached to a Gateway that is gone. Only a
// deletion detaches them; a Gateway moved to another class leaves their
// status to its new controller.
func detachedSets(w *world) []setResult {
	out := make([]setResult, 0, len(w.listenerSets))
	for _, set := range w.listenerSets {
		out = append(out, setResult{
			key: types.NamespacedName{Namespace: set.Namespace, Name: set.Name},
			accepted: cond(string(gwv1.ListenerSetConditionAccepted), false, string(gwv1.ListenerSetReasonParentNotAccepted),
				fmt.Sprintf("Gateway %s/%s is being deleted", w.gateway.Namespace, w.gateway.Name), set.Generation),
		})
	}
	return out
}

// compileSet decides a ListenerSet's Accepted condition from its
// listeners, compiled.
func compileSet(s *setState) setResult {
	gen := s.obj.Generation
	out := setResult{key: types.NamespacedName{Namespace: s.obj.Namespace, Name: s.obj.Name}}
	if s.notAllowed != "" {
		out.accepted = cond(string(gwv1.ListenerSetConditionAccepted), false, string(gwv1.ListenerSetReasonNotAllowed), s.notAllowed, gen)
		return out
	}
	valid := 0
	for _, ls := range s.listeners {
		ls.status.AttachedRoutes = ls.attached
		out.listeners = append(out.listeners, ls.status)
		if ls.valid {
			valid++
		}
	}
	switch {
	case valid == 0:
		out.accepted = cond(string(gwv1.ListenerSetConditionAccepted), false, string(gwv1.ListenerSetReasonListenersNotValid), "no listener is valid", gen)
	case valid < len(s.listeners):
		out.accepted = cond(string(gwv1.ListenerSetConditionAccepted), true, string(gwv1.ListenerSetReasonListenersNotValid), "some listeners are not valid", gen)
	default:
		out.accepted = cond(string(gwv1.ListenerSetConditionAccepted), true, string(gwv1.ListenerSetReasonAccepted), "", gen)
	}
	return out
}

// setProgrammed is a ListenerSet's Programmed condition: its Accepted
// one's refusal, else the Gateway's programming.
func setProgrammed(s setResult, gatewayProgrammed bool, gen int64) metav1.Condition {
	switch {
	case !s.attached():
		return cond(string(gwv1.ListenerSetConditionProgrammed), false, s.accepted.Reason, s.accepted.Message, gen)
	case !gatewayProgrammed:
		return cond(string(gwv1.ListenerSetConditionProgrammed), false, string(gwv1.ListenerSetReasonPending), "waiting for the Gateway to be programmed", gen)
	}
	return cond(string(gwv1.ListenerSetConditionProgrammed), true, string(gwv1.ListenerSetReasonProgrammed), "", gen)
}

// refersToSet says whether a parentRef names the ListenerSet set.
func refersToSet(ref gwv1.ParentReference, routeNS string, set *gwv1.ListenerSet) bool {
	if ref.Group != nil && *ref.Group != groupGateway || ref.Kind == nil || *ref.Kind != kindListenerSet {
		return false
	}
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return ns == set.Namespace && string(ref.Name) == set.Name
}

// isParent says whether a parentRef names the Gateway or one of the
// ListenerSets that name it.
func (w *world) isParent(ref gwv1.ParentReference, routeNS string) bool {
	if refersTo(ref, routeNS, w.gateway) {
		return true
	}
	for _, set := range w.listenerSets {
		if refersToSet(ref, routeNS, set) {
			return true
		}
	}
	return false
}

// goneSet says whether a parentRef names a ListenerSet that no longer
// exists: a route's entry for it, written when it named a Gateway of
// Outrigger's, is removed by whichever Gateway sees it first (which
// Gateway it named is gone with it).
func (w *world) goneSet(ref gwv1.ParentReference, routeNS string) bool {
	if !w.setsServed || ref.Group != nil && *ref.Group != groupGateway || ref.Kind == nil || *ref.Kind != kindListenerSet {
		return false
	}
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return !w.setsExisting[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]
}
