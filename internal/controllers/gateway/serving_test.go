package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// TestConfigTooLargeForASecretIsRefused: a configuration larger than a
// Secret holds (here one route of 8,000 hostnames, a virtual host each) is
// refused before it is written: the Secret keeps the last configuration,
// so the data plane keeps serving it, and the Gateway says why with
// Programmed=False, reason Invalid. Without that route the Gateway is
// programmed again.
func TestConfigTooLargeForASecretIsRefused(t *testing.T) {
	ctx := context.Background()
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw", UID: "gw-uid", Generation: 1},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "outrigger",
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		},
	}
	route := func(name string, hostnames int) *gwv1.HTTPRoute {
		rt := &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: name},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
					BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr.To[gwv1.PortNumber](80)},
				}}}}},
			},
		}
		for i := range hostnames {
			rt.Spec.Hostnames = append(rt.Spec.Hostnames, gwv1.Hostname(fmt.Sprintf("host-%d.example.com", i)))
		}
		return rt
	}
	c := fake.NewClientBuilder().
		WithScheme(clientgoscheme.Scheme).
		WithObjects(
			&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "outrigger"}, Spec: gwv1.GatewayClassSpec{ControllerName: goldenController}},
			gw,
			&corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "web"},
				Spec:       corev1.ServiceSpec{ClusterIP: "198.18.0.10", Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
			},
			route("small", 1),
		).
		WithStatusSubresource(&gwv1.Gateway{}, &gwv1.HTTPRoute{}, &corev1.Service{}).
		Build()
	recorder := record.NewFakeRecorder(100)
	r := &reconciler{client: c, reader: c, own: c, recorder: recorder, kinds: servedKinds(false, false),
		opts: Options{ControllerName: goldenController, Namespace: DefaultNamespace}}
	r.serving = &dataPlaneServing{r: r}
	reconcileGateway := func() *metav1.Condition {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		var cur gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &cur); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(cur.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	}
	config := func() []byte {
		t.Helper()
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: DefaultNamespace, Name: DataPlaneName("edge", "gw")}, &s); err != nil {
			t.Fatal(err)
		}
		return s.Data[ConfigKey]
	}

	reconcileGateway()
	last := config()
	if !bytes.Contains(last, []byte("edge/small")) {
		t.Fatalf("first configuration %s does not serve route small", last)
	}

	if err := c.Create(ctx, route("big", 8000)); err != nil {
		t.Fatal(err)
	}
	programmed := reconcileGateway()
	if programmed == nil || programmed.Status != metav1.ConditionFalse || programmed.Reason != string(gwv1.GatewayReasonInvalid) ||
		!strings.Contains(programmed.Message, fmt.Sprint(corev1.MaxSecretSize)) {
		t.Errorf("Programmed = %+v, want False, Invalid, saying the configuration exceeds %d bytes", programmed, corev1.MaxSecretSize)
	}
	if got := config(); !bytes.Equal(got, last) {
		t.Errorf("the Secret was rewritten (%d bytes); want the last configuration kept", len(got))
	}
	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, "DataPlaneSyncFailed") {
			t.Errorf("event %q, want DataPlaneSyncFailed", e)
		}
	default:
		t.Errorf("no Warning Event says the configuration was refused")
	}

	if err := c.Delete(ctx, route("big", 0)); err != nil {
		t.Fatal(err)
	}
	// Programmed waits for the load balancer's address now (no provider
	// serves the Service here), no longer Invalid.
	if programmed := reconcileGateway(); programmed == nil || programmed.Reason != string(gwv1.GatewayReasonAddressNotAssigned) {
		t.Errorf("without the large route, Programmed = %+v, want AddressNotAssigned", programmed)
	}
}

// A compiled configuration the data plane's own code refuses (a regular
// expression compile let through: a bug FuzzCompile hunts) is not written:
// the Secret is never made, the Gateway would say why, and a Warning
// Event names the data plane's error.
func TestConfigTheDataPlaneRefusesIsNotWritten(t *testing.T) {
	ctx := context.Background()
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw", UID: "gw-uid", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(gw).Build()
	recorder := record.NewFakeRecorder(10)
	r := &reconciler{client: c, reader: c, own: c, recorder: recorder, opts: Options{ControllerName: goldenController, Namespace: DefaultNamespace}}
	s := &dataPlaneServing{r: r}
	bad := gwv1.PathMatchRegularExpression
	res := &result{config: dataplane.Config{Ports: []dataplane.Port{{Port: 80, Protocol: dataplane.HTTP, Hosts: []dataplane.VirtualHost{{
		Rules: []dataplane.Rule{{Route: "edge/bad", Match: gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &bad, Value: ptr.To("/(")}}}},
	}}}}}}
	f, err := s.serve(ctx, gw, &world{}, res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.invalid, "the data plane would refuse this configuration") {
		t.Errorf("invalid = %q, want it to say the data plane would refuse the configuration", f.invalid)
	}
	var secret corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: DefaultNamespace, Name: DataPlaneName("edge", "gw")}, &secret); err == nil {
		t.Errorf("the refused configuration was written: %s", secret.Data[ConfigKey])
	}
	select {
	case e := <-recorder.Events:
		if !strings.Contains(e, "DataPlaneSyncFailed") || !strings.Contains(e, "regular expression") {
			t.Errorf("event %q, want DataPlaneSyncFailed naming the data plane's error", e)
		}
	default:
		t.Error("no Warning Event")
	}
}
