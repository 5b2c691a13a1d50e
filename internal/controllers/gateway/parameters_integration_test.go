//go:build integration

package gateway_test

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestParametersRef: a GatewayClass naming a labelled ConfigMap of
// settings is accepted, and its Gateway's Service gets the
// externalTrafficPolicy, its Deployment the replicas (and a budget to
// match), its programming the timeout; a value out of bounds refuses the
// class and the Gateway (InvalidParameters, naming the key) and leaves
// what serves the Gateway as it was; the
// ConfigMap fixed, both are accepted again with the new values, without
// a change to the class or the Gateway (the ConfigMap is watched).
func TestParametersRef(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+dpNS, "--gateway-data-plane-image=registry.example/outrigger:test")
	ns := namespace(t, c)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge", Labels: map[string]string{gateway.ParametersLabel: "true"}},
		Data:       map[string]string{"replicas": "3", "externalTrafficPolicy": "Local", "idleTimeout": "2m"},
	}
	class := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("with-params")},
		Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerNameFor("sim", ""),
			ParametersRef: &gwv1.ParametersReference{Group: "", Kind: "ConfigMap", Name: cm.Name, Namespace: ptr.To(gwv1.Namespace(ns))}}}
	t.Cleanup(func() { _ = c.Delete(ctx, class) })
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: gwv1.ObjectName(class.Name),
		Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
	}}
	create(t, c, cm, class, gw)
	key := types.NamespacedName{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw")}

	accepted := func(reason, msg string) func() (bool, error) {
		return func() (bool, error) {
			var gc gwv1.GatewayClass
			var got gwv1.Gateway
			if err := c.Get(ctx, client.ObjectKeyFromObject(class), &gc); err != nil {
				return false, err
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
				return false, err
			}
			ca := meta.FindStatusCondition(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted))
			ga := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionAccepted))
			return ca != nil && ca.Reason == reason && strings.Contains(ca.Message, msg) &&
				ga != nil && ga.Reason == reason && strings.Contains(ga.Message, msg), nil
		}
	}
	served := func(replicas int32, pdbOK func(policyv1.PodDisruptionBudgetSpec) bool, idle time.Duration) func() (bool, error) {
		return func() (bool, error) {
			var svc corev1.Service
			var dep appsv1.Deployment
			var pdb policyv1.PodDisruptionBudget
			var secret corev1.Secret
			for _, o := range []client.Object{&svc, &dep, &pdb, &secret} {
				if err := c.Get(ctx, key, o); err != nil {
					return false, client.IgnoreNotFound(err)
				}
			}
			cfg, err := dataplane.Unmarshal(secret.Data[gateway.ConfigKey])
			if err != nil {
				return false, err
			}
			return svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal &&
				ptr.Deref(dep.Spec.Replicas, 0) == replicas && pdbOK(pdb.Spec) &&
				cfg.Settings != nil && cfg.Settings.IdleTimeout == idle, nil
		}
	}
	minOne := func(s policyv1.PodDisruptionBudgetSpec) bool {
		return s.MinAvailable != nil && s.MinAvailable.IntValue() == 1
	}
	maxOne := func(s policyv1.PodDisruptionBudgetSpec) bool {
		return s.MinAvailable == nil && s.MaxUnavailable != nil && s.MaxUnavailable.IntValue() == 1
	}

	testenv.Eventually(t, time.Minute, "class and Gateway accepted", accepted(string(gwv1.GatewayClassReasonAccepted), ""))
	testenv.Eventually(t, time.Minute, "Service Local, 3 replicas, a budget of one, idle timeout 2m programmed", served(3, minOne, 2*time.Minute))

	cm.Data["replicas"] = "50"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "class and Gateway refused, naming the key", accepted(string(gwv1.GatewayClassReasonInvalidParameters), `key "replicas": "50" is not a whole number from 1 to 20`))
	// The reconcile that wrote the refusal left what serves the Gateway as
	// it was: a typo takes no load balancer (and address) away.
	if ok, err := served(3, minOne, 2*time.Minute)(); err != nil || !ok {
		t.Errorf("refused for its parameters, the Gateway's Service, Deployment, budget or programming changed (err %v)", err)
	}

	cm.Data["replicas"], cm.Data["idleTimeout"] = "1", "90s"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "class and Gateway accepted again", accepted(string(gwv1.GatewayClassReasonAccepted), ""))
	testenv.Eventually(t, time.Minute, "1 replica, a budget that lets it be drained, idle timeout 90s", served(1, maxOne, 90*time.Second))
}
