//go:build integration

package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestListenerSets: Outrigger, started as a cluster runs it, attaches a
// ListenerSet of the Gateway's namespace (allowedListeners Same) and
// serves a route attached to it through a parentRef of kind ListenerSet,
// on the ListenerSet's hostname only; a ListenerSet of another namespace
// is NotAllowed (with a Warning Event) until the Gateway allows All; the
// Gateway counts what it takes in attachedListenerSets; a ListenerSet
// deleted leaves no route entry for it behind; the Gateway deleted leaves
// the ListenerSets naming it not accepted.
func TestListenerSets(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns, other := namespace(t, c), namespace(t, c)

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "set") }))
	t.Cleanup(backend.Close)
	svc := service(ns, "web", corev1.ProtocolTCP, 80)
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
		Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("gw.example.com"))}},
		AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: ptr.To(gwv1.NamespacesFromSame)}},
	}}
	set := func(ns, name, host string) *gwv1.ListenerSet {
		return &gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: "gw", Namespace: ptr.To(gwv1.Namespace(gw.Namespace))},
			Listeners: []gwv1.ListenerEntry{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname(host))}},
		}}
	}
	own, foreign := set(ns, "team", "set.example.com"), set(other, "other", "other.example.com")
	route := httpRoute(ns, "r", "team", "/", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 80)})
	route.Spec.ParentRefs[0].Kind = ptr.To(gwv1.Kind("ListenerSet"))
	create(t, c, svc, gw, own, foreign, route)

	accepted := func(s *gwv1.ListenerSet, reason gwv1.ListenerSetConditionReason) func() (bool, error) {
		return func() (bool, error) {
			var got gwv1.ListenerSet
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
				return false, err
			}
			a := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.ListenerSetConditionAccepted))
			return a != nil && a.Reason == string(reason) && a.ObservedGeneration == got.Generation &&
				(a.Status == metav1.ConditionTrue) == (reason == gwv1.ListenerSetReasonAccepted), nil
		}
	}
	attachedSets := func(n int32) func() (bool, error) {
		return func() (bool, error) {
			var got gwv1.Gateway
			if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
				return false, err
			}
			return got.Status.AttachedListenerSets != nil && *got.Status.AttachedListenerSets == n, nil
		}
	}
	testenv.Eventually(t, time.Minute, "the Gateway's namespace's ListenerSet accepted", accepted(own, gwv1.ListenerSetReasonAccepted))
	testenv.Eventually(t, time.Minute, "the other namespace's ListenerSet NotAllowed", accepted(foreign, gwv1.ListenerSetReasonNotAllowed))
	testenv.Eventually(t, time.Minute, "the Gateway attaching one ListenerSet", attachedSets(1))
	testenv.Eventually(t, time.Minute, "a Warning Event on the ListenerSet not allowed", func() (bool, error) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(other)); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == foreign.Name && e.Reason == string(gwv1.ListenerSetReasonNotAllowed) && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	testenv.Eventually(t, time.Minute, "the route accepted by the ListenerSet, its listener counting it", func() (bool, error) {
		var got gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(route), &got); err != nil {
			return false, err
		}
		var s gwv1.ListenerSet
		if err := c.Get(ctx, client.ObjectKeyFromObject(own), &s); err != nil {
			return false, err
		}
		a := parentCondition(got.Status.Parents, "team", string(gwv1.RouteConditionAccepted))
		return a != nil && a.Status == metav1.ConditionTrue && len(s.Status.Listeners) == 1 && s.Status.Listeners[0].AttachedRoutes == 1, nil
	})

	// The route serves the ListenerSet's hostname, not the Gateway's.
	addr := servedByDataPlane(t, ns, "gw", net.JoinHostPort(svc.Spec.ClusterIP, "80"), strings.TrimPrefix(backend.URL, "http://"))
	get := func(host string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	testenv.Eventually(t, time.Minute, "the ListenerSet's hostname served", func() (bool, error) { return get("set.example.com") == http.StatusOK, nil })
	if code := get("gw.example.com"); code != http.StatusNotFound {
		t.Errorf("the Gateway's own hostname answered %d through a route of the ListenerSet, want 404", code)
	}

	// The Gateway allowing every namespace takes the other one too.
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatal(err)
	}
	gw.Spec.AllowedListeners.Namespaces.From = ptr.To(gwv1.NamespacesFromAll)
	if err := c.Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the other namespace's ListenerSet accepted once allowed", accepted(foreign, gwv1.ListenerSetReasonAccepted))
	testenv.Eventually(t, time.Minute, "the Gateway attaching both ListenerSets", attachedSets(2))

	// A ListenerSet deleted: its listener no longer served, and the
	// route's entry for it removed.
	if err := c.Delete(ctx, own); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the Gateway attaching the one left", attachedSets(1))
	testenv.Eventually(t, time.Minute, "the route's entry for the deleted ListenerSet removed", func() (bool, error) {
		var got gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(route), &got); err != nil {
			return false, err
		}
		return parentCondition(got.Status.Parents, "team", string(gwv1.RouteConditionAccepted)) == nil, nil
	})
	testenv.Eventually(t, time.Minute, "the deleted ListenerSet's hostname no longer served", func() (bool, error) { return get("set.example.com") == http.StatusNotFound, nil })

	// The Gateway deleted: the ListenerSet left naming it is no longer
	// accepted nor programmed, and lists no listener, rather than keep
	// the status of a Gateway that is gone.
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the ListenerSet of the deleted Gateway not accepted", accepted(foreign, gwv1.ListenerSetReasonParentNotAccepted))
	var left gwv1.ListenerSet
	if err := c.Get(ctx, client.ObjectKeyFromObject(foreign), &left); err != nil {
		t.Fatal(err)
	}
	if p := meta.FindStatusCondition(left.Status.Conditions, string(gwv1.ListenerSetConditionProgrammed)); p == nil || p.Status != metav1.ConditionFalse {
		t.Errorf("Programmed %+v on the ListenerSet of a deleted Gateway, want False", p)
	}
	if len(left.Status.Listeners) != 0 {
		t.Errorf("%d listener statuses on the ListenerSet of a deleted Gateway, want none", len(left.Status.Listeners))
	}
	testenv.Eventually(t, time.Minute, "the Gateway gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
