package gateway

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"
)

func placementGateway() *gwv1.Gateway {
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "uid-1"},
		Spec: gwv1.GatewaySpec{Infrastructure: &gwv1.GatewayInfrastructure{
			Labels:      map[gwv1.LabelKey]gwv1.LabelValue{"team": "shop", managedByLabel: "someone-else"},
			Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"example.com/owner": "shop"},
		}},
	}
}

// The mode takes only its two values, each the default's "shared" when
// unset.
func TestParseNamespaceMode(t *testing.T) {
	for _, s := range []string{"shared", "gateway"} {
		if m, err := ParseNamespaceMode(s); err != nil || string(m) != s {
			t.Errorf("ParseNamespaceMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "Gateway", "per-gateway"} {
		if _, err := ParseNamespaceMode(s); err == nil || !strings.Contains(err.Error(), "want shared or gateway") {
			t.Errorf("ParseNamespaceMode(%q): err %v, want one naming the values", s, err)
		}
	}
	var unset NamespaceMode
	if unset.String() != "shared" {
		t.Errorf("an unset mode prints %q, want shared", unset.String())
	}
}

// A Gateway's objects are in the shared namespace, or in the Gateway's own
// in gateway mode, under the same name; they carry the Gateway API's
// gateway-name label in both, and the infrastructure's labels never
// replace Outrigger's own.
func TestOwnedMetaFollowsTheMode(t *testing.T) {
	gw := placementGateway()
	for _, tc := range []struct {
		mode NamespaceMode
		want string
	}{{NamespaceShared, DefaultNamespace}, {NamespaceGateway, "shop"}} {
		r := &reconciler{opts: Options{Namespace: DefaultNamespace, NamespaceMode: tc.mode}}
		meta := r.ownedMeta(gw, true)
		if meta.Namespace != tc.want || meta.Name != DataPlaneName("shop", "web") {
			t.Errorf("%s: %s/%s, want %s/%s", tc.mode, meta.Namespace, meta.Name, tc.want, DataPlaneName("shop", "web"))
		}
		if r.key(gw).Namespace != tc.want {
			t.Errorf("%s: key in %s, want %s", tc.mode, r.key(gw).Namespace, tc.want)
		}
		if meta.Labels[gwv1.GatewayNameLabelKey] != "web" || meta.Labels["team"] != "shop" || meta.Annotations["example.com/owner"] != "shop" {
			t.Errorf("%s: labels %v annotations %v lack the gateway-name label or the infrastructure's", tc.mode, meta.Labels, meta.Annotations)
		}
		if meta.Labels[managedByLabel] != managedBy || meta.Labels[GatewayUIDLabel] != "uid-1" {
			t.Errorf("%s: labels %v: the infrastructure's replaced Outrigger's", tc.mode, meta.Labels)
		}
		bare := r.ownedMeta(gw, false)
		if bare.Labels[gwv1.GatewayNameLabelKey] != "web" || bare.Labels["team"] != "" || len(bare.Annotations) != 0 {
			t.Errorf("%s: without infrastructure: labels %v annotations %v", tc.mode, bare.Labels, bare.Annotations)
		}
	}
}

// The data plane is told the namespace its Secret is in; its pods and
// its ServiceAccount carry the infrastructure's labels and annotations.
func TestDataPlaneObjectsFollowTheMode(t *testing.T) {
	gw := placementGateway()
	for _, mode := range []NamespaceMode{NamespaceShared, NamespaceGateway} {
		r := &reconciler{opts: Options{Namespace: DefaultNamespace, NamespaceMode: mode, DataPlaneImage: "outrigger:test"}}
		ns := r.opts.dataPlaneNamespace(gw)
		d := r.deployment(gw, []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}, 2)
		if d.Namespace != ns || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--namespace="+ns) {
			t.Errorf("%s: Deployment in %s with args %q, want namespace %s", mode, d.Namespace, d.Spec.Template.Spec.Containers[0].Args, ns)
		}
		pod := d.Spec.Template.ObjectMeta
		if pod.Labels[gwv1.GatewayNameLabelKey] != "web" || pod.Labels["team"] != "shop" || pod.Annotations["example.com/owner"] != "shop" {
			t.Errorf("%s: pod labels %v annotations %v", mode, pod.Labels, pod.Annotations)
		}
		for _, o := range r.companions(gw, 2) {
			if o.GetNamespace() != ns || o.GetLabels()[gwv1.GatewayNameLabelKey] != "web" {
				t.Errorf("%s: %T in %s labelled %v", mode, o, o.GetNamespace(), o.GetLabels())
			}
			if sa, ok := o.(*corev1.ServiceAccount); ok && (sa.Labels["team"] != "shop" || sa.Annotations["example.com/owner"] != "shop") {
				t.Errorf("%s: ServiceAccount labels %v annotations %v lack the infrastructure's", mode, sa.Labels, sa.Annotations)
			}
		}
	}
}

// Gateway mode caches Outrigger's objects of every namespace, but only
// those made for a Gateway; shared mode only the shared namespace's.
func TestOwnCacheOptions(t *testing.T) {
	shared, err := Options{Namespace: "dp", NamespaceMode: NamespaceShared}.ownCacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := shared.DefaultNamespaces["dp"]; !ok || len(shared.DefaultNamespaces) != 1 {
		t.Errorf("shared mode caches namespaces %v, want dp only", shared.DefaultNamespaces)
	}
	perGateway, err := Options{Namespace: "dp", NamespaceMode: NamespaceGateway}.ownCacheOptions()
	if err != nil {
		t.Fatal(err)
	}
	if len(perGateway.DefaultNamespaces) != 0 {
		t.Errorf("gateway mode caches namespaces %v, want all", perGateway.DefaultNamespaces)
	}
	for _, tc := range []struct {
		labels labels.Set
		want   bool
	}{
		{labels.Set{managedByLabel: managedBy, GatewayUIDLabel: "u"}, true},
		{labels.Set{managedByLabel: managedBy}, false},
		{labels.Set{GatewayUIDLabel: "u"}, false},
	} {
		if got := perGateway.DefaultLabelSelector.Matches(tc.labels); got != tc.want {
			t.Errorf("gateway mode's selector on %v: %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// An object is mapped to its Gateway only where the mode makes them: in
// gateway mode, in the namespace its labels name.
func TestPlacedRight(t *testing.T) {
	obj := func(ns, gwNS string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Labels: map[string]string{GatewayNamespaceLabel: gwNS}}}
	}
	shared := Options{Namespace: "dp", NamespaceMode: NamespaceShared}
	perGateway := Options{Namespace: "dp", NamespaceMode: NamespaceGateway}
	for _, tc := range []struct {
		opts Options
		obj  *corev1.Secret
		want bool
	}{
		{shared, obj("dp", "shop"), true},
		{shared, obj("shop", "shop"), false},
		{perGateway, obj("shop", "shop"), true},
		{perGateway, obj("dp", "shop"), false},
		{perGateway, obj("other", "shop"), false},
	} {
		if got := tc.opts.placedRight(tc.obj); got != tc.want {
			t.Errorf("%s mode, object in %s for a Gateway of %s: %v, want %v", tc.opts.NamespaceMode, tc.obj.Namespace, tc.obj.Labels[GatewayNamespaceLabel], got, tc.want)
		}
	}
}

// GatewayInfrastructure is stated by the data plane in gateway mode only,
// where its conformance test finds the objects; a cloud's load balancers
// never make such objects.
func TestGatewayInfrastructureOnlyInGatewayMode(t *testing.T) {
	opts := Options{GRPCRoute: true, TLSRoute: true, BackendTLSPolicy: true, ListenerSet: true, ProviderName: "local"}
	if slices.Contains(classFeatures(opts, &dataPlaneServing{mode: NamespaceShared}), features.SupportGatewayInfrastructure) {
		t.Error("shared mode states GatewayInfrastructure")
	}
	got := classFeatures(opts, &dataPlaneServing{mode: NamespaceGateway})
	if !slices.Contains(got, features.SupportGatewayInfrastructure) || len(got) != len(SupportedFeatures)+1 {
		t.Errorf("gateway mode states %v, want SupportedFeatures and GatewayInfrastructure", got)
	}
	if slices.Contains(SupportedFeatures, features.SupportGatewayInfrastructure) {
		t.Error("SupportedFeatures (every mode's) lists GatewayInfrastructure")
	}
}

// withMeta adds labels and annotations, never removes, and says whether it
// changed anything.
func TestWithMeta(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "1"}}}
	if _, changed := withMeta(sa, metav1.ObjectMeta{Labels: map[string]string{"a": "1"}}); changed {
		t.Error("the same labels changed it")
	}
	upd, changed := withMeta(sa, metav1.ObjectMeta{Labels: map[string]string{"b": "2"}, Annotations: map[string]string{"c": "3"}})
	if !changed || upd.Labels["a"] != "1" || upd.Labels["b"] != "2" || upd.Annotations["c"] != "3" {
		t.Errorf("changed %v, labels %v annotations %v", changed, upd.Labels, upd.Annotations)
	}
	if sa.Labels["b"] != "" {
		t.Error("withMeta changed its argument")
	}
}
