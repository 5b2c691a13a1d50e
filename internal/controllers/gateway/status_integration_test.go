//go:build integration

package gateway_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestNotAcceptedGateways: a Gateway Outrigger cannot honour (an address
// type the provider takes no request for, a parametersRef to a ConfigMap
// that does not exist) is refused with the specification's reason and
// gets no load balancer; its class says when the class itself names
// parameters that cannot be read.
func TestNotAcceptedGateways(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	withParams := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("with-params")},
		Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerNameFor("sim", ""),
			ParametersRef: &gwv1.ParametersReference{Group: "", Kind: "ConfigMap", Name: "params", Namespace: ptr.To(gwv1.Namespace(ns))}}}
	create(t, c, withParams)
	listeners := []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}
	class := gwv1.ObjectName(gateway.ClassNameFor("sim", ""))
	for _, gw := range []*gwv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostname-address"}, Spec: gwv1.GatewaySpec{GatewayClassName: class, Listeners: listeners,
			Addresses: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType), Value: "lb.example.com"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "parameters"}, Spec: gwv1.GatewaySpec{GatewayClassName: class, Listeners: listeners,
			Infrastructure: &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "params"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "class-parameters"}, Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(withParams.Name), Listeners: listeners}},
	} {
		create(t, c, gw)
	}
	want := map[string]string{
		"hostname-address": string(gwv1.GatewayReasonUnsupportedAddress),
		"parameters":       string(gwv1.GatewayReasonInvalidParameters),
		"class-parameters": string(gwv1.GatewayReasonInvalidParameters),
	}
	for name, reason := range want {
		testenv.Eventually(t, time.Minute, name+" not accepted: "+reason, func() (bool, error) {
			var got gwv1.Gateway
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
				return false, err
			}
			a := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionAccepted))
			p := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
			return a != nil && a.Status == metav1.ConditionFalse && a.Reason == reason && p != nil && p.Status == metav1.ConditionFalse, nil
		})
	}
	testenv.Eventually(t, time.Minute, "the class with parameters not accepted", func() (bool, error) {
		var gc gwv1.GatewayClass
		if err := c.Get(ctx, client.ObjectKeyFromObject(withParams), &gc); err != nil {
			return false, err
		}
		a := meta.FindStatusCondition(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted))
		return a != nil && a.Status == metav1.ConditionFalse && a.Reason == string(gwv1.GatewayClassReasonInvalidParameters), nil
	})
	// (Gateways other tests of this package left are served too: only
	// this test's namespace counts.)
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(dpNS), client.MatchingLabels{gateway.GatewayNamespaceLabel: ns}); err != nil {
		t.Fatal(err)
	}
	lbs := slices.DeleteFunc(cloud.LoadBalancers(), func(lb simcloud.LoadBalancer) bool {
		return !strings.HasPrefix(lb.Tags["service"], dpNS+"/"+ns+"-")
	})
	if len(svcs.Items) != 0 || len(lbs) != 0 {
		t.Errorf("Gateways not accepted got Services %d, load balancers %+v", len(svcs.Items), lbs)
	}
}
