package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// A BackendTLSPolicy has the data plane reach a Service (or one port of
// it, sectionName being the port's name) over TLS. Of the policies naming
// the same Service and sectionName the oldest wins (then the first by
// namespace/name), the others are Conflicted; a port's own policy comes
// before its Service's. A policy whose certificate authorities all fail
// is not accepted and the backends it names answer 500: the
// specification forbids falling back to plain HTTP. Its CA ConfigMaps, in
// the policy's namespace only, are read as the frontend's are
// (frontend.go), from the API and never cached.

// policyTarget is a Service, or one of its ports by name, that a policy
// targets.
type policyTarget struct {
	service types.NamespacedName
	section string
}

// policyVerdict is what a policy resolves to for this Gateway: its
// conditions, and the TLS its backends get (nil: they fail).
type policyVerdict struct {
	policy             *gwv1.BackendTLSPolicy
	accepted, resolved metav1.Condition
	tls                *dataplane.BackendTLS
	// namesConfigMap: it names a CA ConfigMap, read again every
	// backendCARecheck; missing: one of them does not exist (yet).
	namesConfigMap, missing bool
}

// backendPolicies are the policies of a world, decided: the winner of
// each target, and every relevant policy's verdict.
type backendPolicies struct {
	winners  map[policyTarget]*policyVerdict
	verdicts []*policyVerdict
}

// policyTargets are the Services (and ports) a policy targets; a
// targetRef of another kind is not served, and names nothing.
func policyTargets(p *gwv1.BackendTLSPolicy) []policyTarget {
	var out []policyTarget
	for _, ref := range p.Spec.TargetRefs {
		if ref.Group != "" || ref.Kind != kindService {
			continue
		}
		out = append(out, policyTarget{
			service: types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)},
			section: string(ptr.Deref(ref.SectionName, "")),
		})
	}
	return out
}

// olderPolicy orders policies by precedence: the older, then by
// namespace/name.
func olderPolicy(a, b *gwv1.BackendTLSPolicy) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// decidePolicies resolves the policies of w that target a Service its
// routes name: the winner of every target, and each one's conditions.
func decidePolicies(w *world) backendPolicies {
	out := backendPolicies{winners: map[policyTarget]*policyVerdict{}}
	policies := slices.Clone(w.tlsPolicies)
	slices.SortFunc(policies, olderPolicy)
	for _, p := range policies {
		targets := policyTargets(p)
		if !slices.ContainsFunc(targets, func(t policyTarget) bool { return w.services[t.service] != nil }) {
			continue // none of this Gateway's backends: no ancestor here
		}
		v := resolvePolicy(p, w)
		conflicted := false
		for _, t := range targets {
			if _, taken := out.winners[t]; taken {
				conflicted = true
				continue
			}
			out.winners[t] = v
		}
		if conflicted {
			v.accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.PolicyReasonConflicted),
				"an older BackendTLSPolicy targets the same Service and sectionName", p.Generation)
		}
		out.verdicts = append(out.verdicts, v)
	}
	return out
}

// resolvePolicy resolves a policy's validation as the specification
// asks: a caCertificateRef of another kind is InvalidKind, a missing
// ConfigMap or one without a PEM certificate under ca.crt
// InvalidCACertificateRef (ResolvedRefs false); with none usable the
// policy is not accepted (NoValidCACertificate). The usable ones
// together are the backend's authorities.
func resolvePolicy(p *gwv1.BackendTLSPolicy, w *world) *policyVerdict {
	gen := p.Generation
	v := &policyVerdict{
		policy:   p,
		accepted: cond(string(gwv1.PolicyConditionAccepted), true, string(gwv1.PolicyReasonAccepted), "", gen),
		resolved: cond(string(gwv1.BackendTLSPolicyConditionResolvedRefs), true, string(gwv1.BackendTLSPolicyReasonResolvedRefs), "", gen),
	}
	val := p.Spec.Validation
	tls := &dataplane.BackendTLS{Hostname: string(val.Hostname), SubjectAltNames: val.SubjectAltNames}
	fail := func(reason gwv1.PolicyConditionReason, format string, args ...any) {
		if v.resolved.Status == metav1.ConditionTrue {
			v.resolved = cond(string(gwv1.BackendTLSPolicyConditionResolvedRefs), false, string(reason), fmt.Sprintf(format, args...), gen)
		}
	}
	switch {
	case val.WellKnownCACertificates != nil && len(val.CACertificateRefs) == 0:
		if *val.WellKnownCACertificates != gwv1.WellKnownCACertificatesSystem {
			v.accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.PolicyReasonInvalid),
				fmt.Sprintf("wellKnownCACertificates %q is not served; only System is", *val.WellKnownCACertificates), gen)
			return v
		}
		tls.WellKnownSystem = true
	default:
		// A policy's refs are of its own namespace (LocalObjectReference).
		refs := make([]gwv1.ObjectReference, 0, len(val.CACertificateRefs))
		for _, r := range val.CACertificateRefs {
			refs = append(refs, gwv1.ObjectReference{Group: r.Group, Kind: r.Kind, Name: r.Name})
			v.namesConfigMap = v.namesConfigMap || r.Group == "" && r.Kind == kindConfigMap
		}
		tls.CAPEM = caRefsBundle(refs, w.caMaps, func(ref gwv1.ObjectReference) (types.NamespacedName, bool) {
			return types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)}, true
		}, func(f caFault, msg string) {
			v.missing = v.missing || f == caMissing
			reason := gwv1.BackendTLSPolicyReasonInvalidCACertificateRef
			if f == caWrongKind {
				reason = gwv1.BackendTLSPolicyReasonInvalidKind
			}
			fail(reason, "%s", msg)
		})
		if tls.CAPEM == nil {
			v.accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.BackendTLSPolicyReasonNoValidCACertificate),
				"no caCertificateRef resolves to a certificate authority: "+v.resolved.Message, gen)
			return v
		}
	}
	// What the data plane would refuse is refused here first.
	if err := dataplane.CheckBackendTLS(tls); err != nil {
		v.accepted = cond(string(gwv1.PolicyConditionAccepted), false, string(gwv1.PolicyReasonInvalid), err.Error(), gen)
		return v
	}
	v.tls = tls
	return v
}

// forBackend is the policy of a Service port (its own, else the
// Service's), and whether there is one.
func (bp backendPolicies) forBackend(svc types.NamespacedName, portName string) (*policyVerdict, bool) {
	if portName != "" {
		if v, ok := bp.winners[policyTarget{service: svc, section: portName}]; ok {
			return v, true
		}
	}
	v, ok := bp.winners[policyTarget{service: svc}]
	return v, ok
}

// policyAncestor is the ancestorRef a Gateway's status entry on a policy
// has.
func policyAncestor(gw *gwv1.Gateway) gwv1.ParentReference {
	ns := gwv1.Namespace(gw.Namespace)
	return gwv1.ParentReference{Group: &groupGateway, Kind: ptrTo(gwv1.Kind(kindGateway)), Namespace: &ns, Name: gwv1.ObjectName(gw.Name)}
}
