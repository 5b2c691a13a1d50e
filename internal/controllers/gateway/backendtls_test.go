package gateway

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

var policyEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// tlsPolicy is a policy of namespace infra, made age seconds after the
// epoch, targeting Service svc (and its port section when given) with
// the CA ConfigMaps refs.
func tlsPolicy(name string, age int, svc, section string, refs ...gwv1.LocalObjectReference) *gwv1.BackendTLSPolicy {
	ref := gwv1.LocalPolicyTargetReferenceWithSectionName{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: kindService, Name: gwv1.ObjectName(svc)}}
	if section != "" {
		ref.SectionName = ptr.To(gwv1.SectionName(section))
	}
	return &gwv1.BackendTLSPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: name, Generation: 3, CreationTimestamp: metav1.NewTime(policyEpoch.Add(time.Duration(age) * time.Second))},
		Spec: gwv1.BackendTLSPolicySpec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{ref},
			Validation: gwv1.BackendTLSPolicyValidation{CACertificateRefs: refs, Hostname: "backend.example.com"},
		},
	}
}

func caRef(kind, name string) gwv1.LocalObjectReference {
	return gwv1.LocalObjectReference{Kind: gwv1.Kind(kind), Name: gwv1.ObjectName(name)}
}

func policyWorld(t *testing.T, policies ...*gwv1.BackendTLSPolicy) *world {
	ca := testcert.NewCA(t, "backends")
	cm := func(name, data string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: name}, Data: map[string]string{caCertKey: data}}
	}
	return &world{
		gateway: &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "gw"}},
		services: map[types.NamespacedName]*corev1.Service{
			{Namespace: "infra", Name: "web"}: {ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "web"}},
		},
		caMaps: map[types.NamespacedName]*corev1.ConfigMap{
			{Namespace: "infra", Name: "ca"}:      cm("ca", string(ca.PEM)),
			{Namespace: "infra", Name: "garbage"}: cm("garbage", "not a certificate"),
			{Namespace: "other", Name: "ca"}:      cm("ca", string(ca.PEM)),
		},
		tlsPolicies: policies,
	}
}

// A policy's caCertificateRefs resolve as the specification asks, and
// its conditions say so: another kind is InvalidKind, a missing or
// malformed ConfigMap InvalidCACertificateRef, and a policy with no
// usable authority is not accepted (NoValidCACertificate) and gives its
// backends no TLS, so they fail rather than go plain.
func TestAPolicysCertificateAuthoritiesResolveAsTheSpecificationAsks(t *testing.T) {
	for _, tc := range []struct {
		name             string
		refs             []gwv1.LocalObjectReference
		accepted, reason gwv1.PolicyConditionReason
		usable           bool
	}{
		{"one ConfigMap", []gwv1.LocalObjectReference{caRef("ConfigMap", "ca")}, gwv1.PolicyReasonAccepted, gwv1.BackendTLSPolicyReasonResolvedRefs, true},
		{"missing", []gwv1.LocalObjectReference{caRef("ConfigMap", "nope")}, gwv1.BackendTLSPolicyReasonNoValidCACertificate, gwv1.BackendTLSPolicyReasonInvalidCACertificateRef, false},
		{"malformed", []gwv1.LocalObjectReference{caRef("ConfigMap", "garbage")}, gwv1.BackendTLSPolicyReasonNoValidCACertificate, gwv1.BackendTLSPolicyReasonInvalidCACertificateRef, false},
		{"a Secret", []gwv1.LocalObjectReference{caRef("Secret", "ca")}, gwv1.BackendTLSPolicyReasonNoValidCACertificate, gwv1.BackendTLSPolicyReasonInvalidKind, false},
		{"one usable of two", []gwv1.LocalObjectReference{caRef("ConfigMap", "nope"), caRef("ConfigMap", "ca")}, gwv1.PolicyReasonAccepted, gwv1.BackendTLSPolicyReasonInvalidCACertificateRef, true},
	} {
		w := policyWorld(t, tlsPolicy("p", 0, "web", "", tc.refs...))
		v := resolvePolicy(w.tlsPolicies[0], w)
		if gwv1.PolicyConditionReason(v.accepted.Reason) != tc.accepted || gwv1.PolicyConditionReason(v.resolved.Reason) != tc.reason || (v.tls != nil) != tc.usable {
			t.Errorf("%s: Accepted %s, ResolvedRefs %s (%s), usable %v; want %s, %s, %v", tc.name, v.accepted.Reason, v.resolved.Reason, v.resolved.Message, v.tls != nil, tc.accepted, tc.reason, tc.usable)
		}
		if v.accepted.ObservedGeneration != 3 || v.resolved.ObservedGeneration != 3 {
			t.Errorf("%s: conditions not of the policy's generation", tc.name)
		}
	}
	w := policyWorld(t)
	system := tlsPolicy("system", 0, "web", "")
	system.Spec.Validation.WellKnownCACertificates = ptr.To(gwv1.WellKnownCACertificatesSystem)
	if v := resolvePolicy(system, w); v.tls == nil || !v.tls.WellKnownSystem || v.accepted.Reason != string(gwv1.PolicyReasonAccepted) {
		t.Errorf("wellKnownCACertificates System: %+v", v)
	}
	system.Spec.Validation.WellKnownCACertificates = ptr.To(gwv1.WellKnownCACertificatesType("Other"))
	if v := resolvePolicy(system, w); v.tls != nil || v.accepted.Reason != string(gwv1.PolicyReasonInvalid) {
		t.Errorf("wellKnownCACertificates Other: %+v", v)
	}
}

// Of the policies targeting the same Service and sectionName the oldest
// wins, then the first by name; the others are Conflicted. A port's own
// policy does not conflict with its Service's, and is the one its
// backends get.
func TestTheOldestPolicyOfATargetWinsAndAPortsOwnComesFirst(t *testing.T) {
	ca := []gwv1.LocalObjectReference{caRef("ConfigMap", "ca")}
	newer := tlsPolicy("a-newer", 10, "web", "", ca...)
	older := tlsPolicy("z-older", 5, "web", "", ca...)
	sameAgeB := tlsPolicy("b", 20, "web", "https", ca...)
	sameAgeA := tlsPolicy("a", 20, "web", "https", ca...)
	elsewhere := tlsPolicy("elsewhere", 0, "not-a-backend", "", ca...)
	w := policyWorld(t, newer, sameAgeB, older, elsewhere, sameAgeA)
	bp := decidePolicies(w)
	reasons := map[string]string{}
	for _, v := range bp.verdicts {
		reasons[v.policy.Name] = v.accepted.Reason
	}
	want := map[string]string{"z-older": "Accepted", "a-newer": "Conflicted", "a": "Accepted", "b": "Conflicted"}
	for name, r := range want {
		if reasons[name] != r {
			t.Errorf("%s: Accepted reason %q, want %q", name, reasons[name], r)
		}
	}
	if _, ok := reasons["elsewhere"]; ok {
		t.Error("a policy targeting no backend of the Gateway has a verdict for it")
	}
	svc := types.NamespacedName{Namespace: "infra", Name: "web"}
	if v, _ := bp.forBackend(svc, "https"); v == nil || v.policy != sameAgeA {
		t.Errorf("port https gets %v, want policy a", v)
	}
	if v, _ := bp.forBackend(svc, "other"); v == nil || v.policy != older {
		t.Errorf("another port gets %v, want the Service's z-older", v)
	}
	if _, ok := bp.forBackend(types.NamespacedName{Namespace: "infra", Name: "plain"}, ""); ok {
		t.Error("a Service without a policy gets one")
	}
}

// A policy that does not resolve fails its backends (500), never plain
// HTTP; one that does gives them its TLS; others are untouched.
func TestABackendGetsItsPolicysTLSOrFails(t *testing.T) {
	bad := tlsPolicy("bad", 0, "web", "broken", caRef("ConfigMap", "nope"))
	good := tlsPolicy("good", 0, "web", "", caRef("ConfigMap", "ca"))
	w := policyWorld(t, bad, good)
	w.services[types.NamespacedName{Namespace: "infra", Name: "web"}].Spec = corev1.ServiceSpec{ClusterIP: "198.18.0.10", Ports: []corev1.ServicePort{
		{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP},
		{Name: "broken", Port: 8443, Protocol: corev1.ProtocolTCP},
	}}
	w.services[types.NamespacedName{Namespace: "infra", Name: "plain"}] = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "plain"},
		Spec:       corev1.ServiceSpec{ClusterIP: "198.18.0.11", Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	backend := func(name string, port int32) gwv1.HTTPBackendRef {
		return gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr.To(port)}}}
	}
	hr := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "infra", Name: "r"}, Spec: gwv1.HTTPRouteSpec{Rules: []gwv1.HTTPRouteRule{
		{BackendRefs: []gwv1.HTTPBackendRef{backend("web", 443), backend("web", 8443), backend("plain", 80)}},
	}}}
	decided := *w
	decided.policies = decidePolicies(w)
	_, _, out := resolveBackends(&decided, route{kind: routeKindTable[0], obj: hr})
	bs := out.http[0].rule.Backends
	if bs[0].TLS == nil || bs[0].Invalid || bs[0].TLS.Hostname != "backend.example.com" {
		t.Errorf("port https: %+v, want the Service's policy's TLS", bs[0])
	}
	if bs[1].TLS != nil || !bs[1].Invalid {
		t.Errorf("port broken: %+v, want invalid without TLS", bs[1])
	}
	if bs[2].TLS != nil || bs[2].Invalid {
		t.Errorf("a Service without a policy: %+v, want plain", bs[2])
	}
}
