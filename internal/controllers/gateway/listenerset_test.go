package gateway

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestSetAllowed: a Gateway takes no ListenerSet unless its
// allowedListeners says so, then those of its namespace (Same), of the
// namespaces its selector picks (Selector), or of any (All).
func TestSetAllowed(t *testing.T) {
	w := &world{namespaces: map[string]*corev1.Namespace{
		"edge":   {ObjectMeta: metav1.ObjectMeta{Name: "edge"}},
		"team-a": {ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"listeners": "yes"}}},
		"team-b": {ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
	}}
	allowed := func(from *gwv1.FromNamespaces, sel *metav1.LabelSelector) map[string]bool {
		w.gateway = &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw"}}
		if from != nil {
			w.gateway.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: from, Selector: sel}}
		}
		out := map[string]bool{}
		for _, ns := range []string{"edge", "team-a", "team-b"} {
			out[ns] = setAllowed(w, &gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}) == ""
		}
		return out
	}
	for _, tc := range []struct {
		name string
		from *gwv1.FromNamespaces
		sel  *metav1.LabelSelector
		want map[string]bool
	}{
		{"unset", nil, nil, map[string]bool{}},
		{"None", ptr.To(gwv1.NamespacesFromNone), nil, map[string]bool{}},
		{"Same", ptr.To(gwv1.NamespacesFromSame), nil, map[string]bool{"edge": true}},
		{"Selector", ptr.To(gwv1.NamespacesFromSelector), &metav1.LabelSelector{MatchLabels: map[string]string{"listeners": "yes"}}, map[string]bool{"team-a": true}},
		{"Selector without a selector", ptr.To(gwv1.NamespacesFromSelector), nil, map[string]bool{}},
		{"All", ptr.To(gwv1.NamespacesFromAll), nil, map[string]bool{"edge": true, "team-a": true, "team-b": true}},
	} {
		got := allowed(tc.from, tc.sel)
		for _, ns := range []string{"edge", "team-a", "team-b"} {
			if got[ns] != tc.want[ns] {
				t.Errorf("%s: a ListenerSet of %s allowed %v, want %v", tc.name, ns, got[ns], tc.want[ns])
			}
		}
	}
}
