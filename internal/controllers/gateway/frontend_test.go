package gateway

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// A client validation's caCertificateRefs resolve as the specification
// asks: each unusable one gives the listener its reason, and only when none
// is usable does the port have no authorities (the listener not accepted).
func TestClientValidationRefs(t *testing.T) {
	ca := testcert.NewCA(t, "clients")
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}}
	cm := func(ns, name, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{caCertKey: data}}
	}
	w := &world{gateway: gw, caMaps: map[types.NamespacedName]*corev1.ConfigMap{
		{Namespace: "infra", Name: "ca"}:      cm("infra", "ca", string(ca.PEM)),
		{Namespace: "infra", Name: "garbage"}: cm("infra", "garbage", "not a certificate"),
		{Namespace: "web", Name: "ca"}:        cm("web", "ca", string(ca.PEM)),
	}}
	ref := func(kind, ns, name string) gwv1.ObjectReference {
		r := gwv1.ObjectReference{Kind: gwv1.Kind(kind), Name: gwv1.ObjectName(name)}
		if ns != "" {
			r.Namespace = ptr.To(gwv1.Namespace(ns))
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		refs   []gwv1.ObjectReference
		reason gwv1.ListenerConditionReason
		usable bool
	}{
		{"one ConfigMap", []gwv1.ObjectReference{ref("ConfigMap", "", "ca")}, "", true},
		{"missing", []gwv1.ObjectReference{ref("ConfigMap", "", "nope")}, gwv1.ListenerReasonInvalidCACertificateRef, false},
		{"no certificate under ca.crt", []gwv1.ObjectReference{ref("ConfigMap", "", "garbage")}, gwv1.ListenerReasonInvalidCACertificateRef, false},
		{"a Service", []gwv1.ObjectReference{ref("Service", "", "ca")}, gwv1.ListenerReasonInvalidCACertificateKind, false},
		{"another namespace without a grant", []gwv1.ObjectReference{ref("ConfigMap", "web", "ca")}, gwv1.ListenerReasonRefNotPermitted, false},
		{"one usable of two", []gwv1.ObjectReference{ref("ConfigMap", "", "nope"), ref("ConfigMap", "", "ca")}, gwv1.ListenerReasonInvalidCACertificateRef, true},
	} {
		out := resolveClientValidation(&gwv1.FrontendTLSValidation{CACertificateRefs: tc.refs}, w)
		if gwv1.ListenerConditionReason(out.reason) != tc.reason || (out.validation != nil) != tc.usable {
			t.Errorf("%s: reason %q (%s), usable %v; want %q, %v", tc.name, out.reason, out.message, out.validation != nil, tc.reason, tc.usable)
		}
	}
	// A ReferenceGrant in the ConfigMap's namespace lets it be used.
	w.grants = []*gwv1.ReferenceGrant{{ObjectMeta: metav1.ObjectMeta{Namespace: "web"}, Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "infra"}},
		To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "ConfigMap"}},
	}}}
	if out := resolveClientValidation(&gwv1.FrontendTLSValidation{CACertificateRefs: []gwv1.ObjectReference{ref("ConfigMap", "web", "ca")}}, w); out.validation == nil || out.reason != "" {
		t.Errorf("a granted ConfigMap: %+v", out)
	}
}

// The default validation serves every port a port's own does not; a
// Gateway says so when any of them falls back to serving clients without
// a valid certificate.
func TestFrontendValidationPerPort(t *testing.T) {
	def := &gwv1.FrontendTLSValidation{CACertificateRefs: []gwv1.ObjectReference{{Kind: "ConfigMap", Name: "default"}}}
	own := &gwv1.FrontendTLSValidation{CACertificateRefs: []gwv1.ObjectReference{{Kind: "ConfigMap", Name: "own"}}, Mode: gwv1.AllowInsecureFallback}
	gw := &gwv1.Gateway{Spec: gwv1.GatewaySpec{TLS: &gwv1.GatewayTLSConfig{Frontend: &gwv1.FrontendTLSConfig{
		Default: gwv1.TLSConfig{Validation: def},
		PerPort: []gwv1.TLSPortConfig{{Port: 8443, TLS: gwv1.TLSConfig{Validation: own}}},
	}}}}
	if frontendValidation(gw, 443) != def || frontendValidation(gw, 8443) != own {
		t.Error("port 443 should have the default, 8443 its own")
	}
	if !insecureFrontend(gw) {
		t.Error("a port's AllowInsecureFallback is not reported")
	}
	gw.Spec.TLS.Frontend.PerPort = nil
	if insecureFrontend(gw) || frontendValidation(&gwv1.Gateway{}, 443) != nil {
		t.Error("AllowValidOnly reported as insecure, or a Gateway without spec.tls given a validation")
	}
}
