//go:build integration

package gateway_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestConfigTooLargeForASecret: one route the API server accepts (16
// hostnames, 100 matches of 1,000-byte paths) compiles to a configuration
// larger than the 1 MiB a Secret holds. It is refused before the write,
// which the API server would refuse along with every status: the Secret
// keeps the last configuration, the Gateway says why (Programmed=False,
// Invalid); without the route the Gateway is programmed again.
func TestConfigTooLargeForASecret(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		},
	}
	create(t, c, service(ns, "web", corev1.ProtocolTCP, 80), gw, httpRoute(ns, "small", "gw", "/small", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 80)}))
	// Every Outrigger of this package's tests serves the class: the
	// Gateway goes, with its load balancer, while this test's still runs.
	t.Cleanup(func() {
		if err := c.Delete(ctx, gw); err != nil {
			t.Error(err)
			return
		}
		testenv.Eventually(t, time.Minute, "Gateway and its load balancer gone", func() (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
			lbs := slices.DeleteFunc(cloud.LoadBalancers(), func(lb simcloud.LoadBalancer) bool {
				return !strings.HasPrefix(lb.Tags["service"], dpNS+"/")
			})
			return apierrors.IsNotFound(err) && len(lbs) == 0, client.IgnoreNotFound(err)
		})
	})

	programmed := func() (*metav1.Condition, error) {
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed)), nil
	}
	key := types.NamespacedName{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw")}
	var last []byte
	testenv.Eventually(t, time.Minute, "Gateway programmed with route small", func() (bool, error) {
		var s corev1.Secret
		if err := c.Get(ctx, key, &s); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		last = s.Data[gateway.ConfigKey]
		p, err := programmed()
		return p != nil && p.Status == metav1.ConditionTrue && bytes.Contains(last, []byte(ns+"/small")), err
	})

	big := httpRoute(ns, "big", "gw", "/")
	for i := range 16 {
		big.Spec.Hostnames = append(big.Spec.Hostnames, gwv1.Hostname(fmt.Sprintf("host-%d.example.com", i)))
	}
	big.Spec.Rules = nil
	for r := range 2 {
		rule := gwv1.HTTPRouteRule{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: backendRef("web", 80)}}}
		for m := range 50 {
			path := fmt.Sprintf("/%d/%d/%s", r, m, strings.Repeat("p", 990))
			rule.Matches = append(rule.Matches, gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(path)}})
		}
		big.Spec.Rules = append(big.Spec.Rules, rule)
	}
	create(t, c, big)
	testenv.Eventually(t, time.Minute, "Gateway not programmed: its configuration does not fit a Secret", func() (bool, error) {
		p, err := programmed()
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == string(gwv1.GatewayReasonInvalid) &&
			strings.Contains(p.Message, fmt.Sprint(corev1.MaxSecretSize)), err
	})
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data[gateway.ConfigKey], last) {
		t.Errorf("the Secret changed (%d bytes); want the last configuration kept", len(s.Data[gateway.ConfigKey]))
	}

	if err := c.Delete(ctx, big); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "Gateway programmed again without the large route", func() (bool, error) {
		p, err := programmed()
		return p != nil && p.Status == metav1.ConditionTrue, err
	})
}
