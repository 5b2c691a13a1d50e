//go:build integration

package gateway_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// infrastructureGateway is a Gateway of the sim's class whose
// spec.infrastructure gives labels and annotations, as the conformance
// test GatewayInfrastructureMetadata's does.
func infrastructureGateway(ns, name string) *gwv1.Gateway {
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Infrastructure: &gwv1.GatewayInfrastructure{
				Labels:      map[gwv1.LabelKey]gwv1.LabelValue{"key2": "value2"},
				Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"key1": "value1"},
			},
			Listeners: []gwv1.Listener{{Name: "http", Port: 8080, Protocol: gwv1.HTTPProtocolType}},
		},
	}
}

// infrastructureObjects lists, as the conformance test does, the
// ServiceAccounts, Deployments (for their pod template) and Services of
// namespace ns labelled with the Gateway API's gateway-name label.
func infrastructureObjects(c client.Client, ns, name string) (sas []corev1.ServiceAccount, deps []appsv1.Deployment, svcs []corev1.Service, err error) {
	sel := client.MatchingLabels{gwv1.GatewayNameLabelKey: name}
	var saList corev1.ServiceAccountList
	var depList appsv1.DeploymentList
	var svcList corev1.ServiceList
	for _, l := range []client.ObjectList{&saList, &depList, &svcList} {
		if err := c.List(ctx, l, client.InNamespace(ns), sel); err != nil {
			return nil, nil, nil, err
		}
	}
	return saList.Items, depList.Items, svcList.Items, nil
}

// carries says what of want's labels and annotations meta lacks, or "".
func carries(what string, labels, annotations map[string]string, want map[string]string, wantAnnotations map[string]string) string {
	var missing []string
	for k, v := range want {
		if labels[k] != v {
			missing = append(missing, "label "+k)
		}
	}
	for k, v := range wantAnnotations {
		if annotations[k] != v {
			missing = append(missing, "annotation "+k)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	slices.Sort(missing)
	return fmt.Sprintf("%s lacks %s (labels %v, annotations %v)", what, strings.Join(missing, ", "), labels, annotations)
}

// classStates says whether the sim's GatewayClass states feature f.
func classStates(c client.Client, f features.FeatureName) (bool, error) {
	var gc gwv1.GatewayClass
	if err := c.Get(ctx, types.NamespacedName{Name: gateway.ClassNameFor("sim", "")}, &gc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return slices.ContainsFunc(gc.Status.SupportedFeatures, func(s gwv1.SupportedFeature) bool { return s.Name == gwv1.FeatureName(f) }), nil
}

// TestGatewayNamespaceMode: with --gateway-namespace-mode=gateway, a
// Gateway's data plane (Secret, Deployment, PodDisruptionBudget,
// ServiceAccount, Role, RoleBinding, Service) is made in the Gateway's own
// namespace, nothing in --gateway-namespace; the ServiceAccount, the pods
// and the Service carry the gateway-name label and spec.infrastructure's
// labels and annotations (what GatewayInfrastructureMetadata reads), and
// follow a label added later; the data plane is told its namespace; the
// class states GatewayInfrastructure. Deleted, the Gateway takes them all
// along; an object already at a data plane's name, made for another UID,
// is never changed or deleted.
func TestGatewayNamespaceMode(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+dpNS, "--gateway-namespace-mode=gateway", "--gateway-data-plane-image=registry.example/outrigger:test")
	ns := namespace(t, c)
	gw := infrastructureGateway(ns, "gw")
	create(t, c, gw)
	wantLabels, wantAnnotations := map[string]string{"key2": "value2", gwv1.GatewayNameLabelKey: "gw"}, map[string]string{"key1": "value1"}

	testenv.Eventually(t, time.Minute, "ServiceAccount, Deployment and Service in the Gateway's namespace, labelled as the conformance test looks for them", func() (bool, error) {
		sas, deps, svcs, err := infrastructureObjects(c, ns, "gw")
		return len(sas) == 1 && len(deps) == 1 && len(svcs) == 1, err
	})
	sas, deps, svcs, err := infrastructureObjects(c, ns, "gw")
	if err != nil {
		t.Fatal(err)
	}
	pod := deps[0].Spec.Template
	for _, problem := range []string{
		carries("ServiceAccount", sas[0].Labels, sas[0].Annotations, wantLabels, wantAnnotations),
		carries("pod template", pod.Labels, pod.Annotations, wantLabels, wantAnnotations),
		carries("Service", svcs[0].Labels, svcs[0].Annotations, wantLabels, wantAnnotations),
	} {
		if problem != "" {
			t.Error(problem)
		}
	}
	key := types.NamespacedName{Namespace: ns, Name: gateway.DataPlaneName(ns, "gw")}
	if args := strings.Join(pod.Spec.Containers[0].Args, " "); args != "gateway-dataplane --namespace="+ns+" --secret="+key.Name {
		t.Errorf("data plane args %q, want its Secret's namespace %s", args, ns)
	}
	for _, o := range []client.Object{&corev1.Secret{}, &policyv1.PodDisruptionBudget{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		if err := c.Get(ctx, key, o); err != nil {
			t.Errorf("%T %s: %v", o, key, err)
		} else if o.GetLabels()[gwv1.GatewayNameLabelKey] != "gw" {
			t.Errorf("%T %s labels %v lack the gateway-name label", o, key, o.GetLabels())
		}
	}
	var rb rbacv1.RoleBinding
	if err := c.Get(ctx, key, &rb); err == nil && (len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != ns) {
		t.Errorf("RoleBinding subjects %+v, want the ServiceAccount of %s", rb.Subjects, ns)
	}
	testenv.Eventually(t, time.Minute, "the class stating GatewayInfrastructure", func() (bool, error) {
		return classStates(c, features.SupportGatewayInfrastructure)
	})
	// The Gateway reconciled, the shared namespace was never needed.
	if err := c.Get(ctx, types.NamespacedName{Name: dpNS}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s made (or unreadable: %v) in gateway mode", dpNS, err)
	}

	// A label added to the infrastructure reaches the ServiceAccount,
	// the pods and the Service.
	patch := client.MergeFrom(gw.DeepCopy())
	gw.Spec.Infrastructure.Labels["key3"] = "value3"
	if err := c.Patch(ctx, gw, patch); err != nil {
		t.Fatal(err)
	}
	wantLabels["key3"] = "value3"
	testenv.Eventually(t, time.Minute, "the added label on the ServiceAccount, pod template and Service", func() (bool, error) {
		sas, deps, svcs, err := infrastructureObjects(c, ns, "gw")
		if err != nil || len(sas) != 1 || len(deps) != 1 || len(svcs) != 1 {
			return false, err
		}
		return carries("", sas[0].Labels, nil, wantLabels, nil) == "" && carries("", deps[0].Spec.Template.Labels, nil, wantLabels, nil) == "" &&
			carries("", svcs[0].Labels, nil, wantLabels, nil) == "", nil
	})

	// Another's ServiceAccount at a second Gateway's data plane name.
	squatter := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gateway.DataPlaneName(ns, "gw2"),
		Labels: map[string]string{"app.kubernetes.io/managed-by": "outrigger", gateway.GatewayUIDLabel: "someone-else", "theirs": "yes"}}}
	create(t, c, squatter)
	gw2 := infrastructureGateway(ns, "gw2")
	create(t, c, gw2)
	testenv.Eventually(t, time.Minute, "gw2's Warning Event naming the ServiceAccount", func() (bool, error) {
		evs, err := testenv.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name == "gw2" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "ServiceAccount") &&
				strings.Contains(e.Message, "not Outrigger's")
		}), nil
	})

	// Deleted, the Gateways take what Outrigger made for them along, and
	// leave another's alone.
	for _, g := range []*gwv1.Gateway{gw, gw2} {
		if err := c.Delete(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, time.Minute, "gw's data plane deleted from its namespace", func() (bool, error) {
		for _, o := range []client.Object{&corev1.Service{}, &appsv1.Deployment{}, &corev1.Secret{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}} {
			if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
	testenv.Eventually(t, time.Minute, "gw2 gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw2), &gwv1.Gateway{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	var got corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKeyFromObject(squatter), &got); err != nil || got.Labels["theirs"] != "yes" || got.Labels["key2"] != "" {
		t.Errorf("another's ServiceAccount changed or deleted: %v, labels %v", err, got.Labels)
	}
}

// TestSharedNamespaceMode: by default a Gateway's data plane stays in
// --gateway-namespace, now with the gateway-name label, and nothing is made
// in the Gateway's namespace; the class does not state
// GatewayInfrastructure, whose test looks in the Gateway's namespace.
func TestSharedNamespaceMode(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+dpNS, "--gateway-data-plane-image=registry.example/outrigger:test")
	ns := namespace(t, c)
	gw := infrastructureGateway(ns, "gw")
	create(t, c, gw)
	testenv.Eventually(t, time.Minute, "ServiceAccount, Deployment and Service in the shared namespace", func() (bool, error) {
		sas, deps, svcs, err := infrastructureObjects(c, dpNS, "gw")
		return len(sas) == 1 && len(deps) == 1 && len(svcs) == 1, err
	})
	sas, deps, svcs, err := infrastructureObjects(c, dpNS, "gw")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"key2": "value2", gateway.GatewayNamespaceLabel: ns}
	for _, problem := range []string{
		carries("ServiceAccount", sas[0].Labels, sas[0].Annotations, want, nil),
		carries("pod template", deps[0].Spec.Template.Labels, deps[0].Spec.Template.Annotations, want, map[string]string{"key1": "value1"}),
		carries("Service", svcs[0].Labels, svcs[0].Annotations, want, map[string]string{"key1": "value1"}),
	} {
		if problem != "" {
			t.Error(problem)
		}
	}
	if args := deps[0].Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--namespace="+dpNS) {
		t.Errorf("data plane args %q, want --namespace=%s", args, dpNS)
	}
	sas, deps, svcs, err = infrastructureObjects(c, ns, "gw")
	if err != nil || len(sas)+len(deps)+len(svcs) != 0 {
		t.Errorf("in the Gateway's namespace: %d ServiceAccounts, %d Deployments, %d Services (%v)", len(sas), len(deps), len(svcs), err)
	}
	testenv.Eventually(t, time.Minute, "the class reconciled, not stating GatewayInfrastructure", func() (bool, error) {
		var gc gwv1.GatewayClass
		if err := c.Get(ctx, types.NamespacedName{Name: gateway.ClassNameFor("sim", "")}, &gc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		states, err := classStates(c, features.SupportGatewayInfrastructure)
		return len(gc.Status.SupportedFeatures) > 0 && !states, err
	})
}
