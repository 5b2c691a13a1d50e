package gateway

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestMirrorShareIsPercentOrFractionOrEveryRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        gwv1.HTTPRequestMirrorFilter
		num, den int32
	}{
		{"neither: every request", gwv1.HTTPRequestMirrorFilter{}, 0, 0},
		{"percent", gwv1.HTTPRequestMirrorFilter{Percent: ptr.To[int32](20)}, 20, 100},
		{"no percent", gwv1.HTTPRequestMirrorFilter{Percent: ptr.To[int32](0)}, 0, 100},
		{"a hundred percent: every request", gwv1.HTTPRequestMirrorFilter{Percent: ptr.To[int32](100)}, 0, 0},
		{"fraction", gwv1.HTTPRequestMirrorFilter{Fraction: &gwv1.Fraction{Numerator: 25, Denominator: ptr.To[int32](50)}}, 25, 50},
		{"fraction of a hundred by default", gwv1.HTTPRequestMirrorFilter{Fraction: &gwv1.Fraction{Numerator: 3}}, 3, 100},
		{"fraction of all or more: every request", gwv1.HTTPRequestMirrorFilter{Fraction: &gwv1.Fraction{Numerator: 7, Denominator: ptr.To[int32](5)}}, 0, 0},
	} {
		if num, den := mirrorShare(&tc.f); num != tc.num || den != tc.den {
			t.Errorf("%s: %d/%d, want %d/%d", tc.name, num, den, tc.num, tc.den)
		}
	}
}

// The Services a route's mirrors name (its rules' and its backendRefs')
// are read and watched as its backends are: a mirror's Service changing
// reprograms the Gateway.
func TestBackendRefsNameTheMirrors(t *testing.T) {
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{Rules: []gwv1.HTTPRouteRule{{
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{
				BackendRef: gwv1.BackendObjectReference{Name: "copy", Namespace: ptr.To[gwv1.Namespace]("shadow")},
			}}},
			BackendRefs: []gwv1.HTTPBackendRef{{
				BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web"}},
				Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{
					BackendRef: gwv1.BackendObjectReference{Name: "web-copy"},
				}}},
			}},
		}}},
	}
	rt := routesOf(route)[0]
	var names []string
	for _, ref := range rt.kind.backendRefs(route) {
		names = append(names, string(ref.Name))
	}
	if !slices.Equal(names, []string{"web", "copy", "web-copy"}) {
		t.Errorf("backendRefs name %v, want [web copy web-copy]", names)
	}
}
