//go:build integration

package gateway_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestBackendTLSPolicyStatus: Outrigger, started as a cluster runs it,
// watches BackendTLSPolicies: a policy targeting a Service a route of the
// Gateway names gets the Gateway as ancestor, NoValidCACertificate while
// its CA ConfigMap does not exist, Accepted once it does (read again, not
// watched), and loses the entry when the Gateway is deleted.
func TestBackendTLSPolicyStatus(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns := namespace(t, c)
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
		Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
	}}
	policy := &gwv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"}, Spec: gwv1.BackendTLSPolicySpec{
		TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "web"}}},
		Validation: gwv1.BackendTLSPolicyValidation{CACertificateRefs: []gwv1.LocalObjectReference{{Kind: "ConfigMap", Name: "web-ca"}}, Hostname: "web.example.com"},
	}}
	create(t, c, gw, service(ns, "web", corev1.ProtocolTCP, 443),
		httpRoute(ns, "r", "gw", "/", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 443)}), policy)

	ancestor := func() (*gwv1.PolicyAncestorStatus, error) {
		var got gwv1.BackendTLSPolicy
		if err := c.Get(ctx, client.ObjectKeyFromObject(policy), &got); err != nil {
			return nil, err
		}
		i := slices.IndexFunc(got.Status.Ancestors, func(a gwv1.PolicyAncestorStatus) bool {
			return a.ControllerName == gateway.ControllerNameFor("sim", "") && string(a.AncestorRef.Name) == "gw"
		})
		if i < 0 {
			return nil, nil
		}
		return &got.Status.Ancestors[i], nil
	}
	reasons := func(accepted, resolved string) func() (bool, error) {
		return func() (bool, error) {
			a, err := ancestor()
			if a == nil || err != nil {
				return false, err
			}
			ac := meta.FindStatusCondition(a.Conditions, string(gwv1.PolicyConditionAccepted))
			rc := meta.FindStatusCondition(a.Conditions, string(gwv1.BackendTLSPolicyConditionResolvedRefs))
			return ac != nil && ac.Reason == accepted && rc != nil && rc.Reason == resolved, nil
		}
	}
	testenv.Eventually(t, time.Minute, "the policy NoValidCACertificate without its ConfigMap",
		reasons(string(gwv1.BackendTLSPolicyReasonNoValidCACertificate), string(gwv1.BackendTLSPolicyReasonInvalidCACertificateRef)))

	ca := testcert.NewCA(t, "backends")
	create(t, c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-ca"}, Data: map[string]string{"ca.crt": string(ca.PEM)}})
	testenv.Eventually(t, time.Minute, "the policy accepted once its ConfigMap exists",
		reasons(string(gwv1.PolicyReasonAccepted), string(gwv1.BackendTLSPolicyReasonResolvedRefs)))

	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the Gateway's ancestor entry removed with it", func() (bool, error) {
		a, err := ancestor()
		return a == nil && err == nil, err
	})
}
