package gateway

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// A Gateway's spec.tls.frontend has its HTTPS ports check client
// certificates against the certificate authorities in ConfigMaps (key
// ca.crt): the default for every port, or a port's own. The ConfigMaps are
// read as certificate Secrets are, from the API, only those of the
// Gateway's namespace or granted to it, and never cached.

const (
	kindConfigMap = "ConfigMap"
	// caCertKey is the ConfigMap key Gateway API names for a CA bundle.
	caCertKey = "ca.crt"
)

// frontendValidation is the client validation spec.tls.frontend gives an
// HTTPS port: its perPort entry, else the default; nil asks for none.
func frontendValidation(gw *gwv1.Gateway, port gwv1.PortNumber) *gwv1.FrontendTLSValidation {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return nil
	}
	f := gw.Spec.TLS.Frontend
	for _, pp := range f.PerPort {
		if pp.Port == port {
			return pp.TLS.Validation
		}
	}
	return f.Default.Validation
}

// insecureFrontend says whether any of the Gateway's client validations
// serves clients without a valid certificate (AllowInsecureFallback): the
// Gateway says so in its InsecureFrontendValidationMode condition.
func insecureFrontend(gw *gwv1.Gateway) bool {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return false
	}
	f := gw.Spec.TLS.Frontend
	if v := f.Default.Validation; v != nil && v.Mode == gwv1.AllowInsecureFallback {
		return true
	}
	for _, pp := range f.PerPort {
		if v := pp.TLS.Validation; v != nil && v.Mode == gwv1.AllowInsecureFallback {
			return true
		}
	}
	return false
}

// readableCA is the ConfigMap a caCertificateRef names, when Outrigger may
// read it for gw: a ConfigMap, in the Gateway's namespace or granted to
// it. A ref that is neither is never read (compile says why).
func readableCA(gw *gwv1.Gateway, ref gwv1.ObjectReference, grants []*gwv1.ReferenceGrant) (types.NamespacedName, bool) {
	if ref.Group != "" || ref.Kind != kindConfigMap {
		return types.NamespacedName{}, false
	}
	ns := gw.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	if ns != gw.Namespace && !granted(grants, groupGateway, kindGateway, gw.Namespace, "", kindConfigMap, ns, string(ref.Name)) {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// clientValidationOutcome is what an HTTPS listener's client validation
// resolves to: the port's check (nil when none of its refs is usable), the
// first unusable ref's ResolvedRefs reason and message, and whether a
// ConfigMap named does not exist (yet).
type clientValidationOutcome struct {
	validation      *dataplane.ClientValidation
	reason, message string
	missing         bool
}

// resolveClientValidation resolves v's caCertificateRefs as the
// specification asks: a ref of another kind is InvalidCACertificateKind,
// another namespace's without a ReferenceGrant RefNotPermitted, a missing
// ConfigMap or one without a PEM certificate under ca.crt
// InvalidCACertificateRef; the usable ones together are the port's
// authorities.
func resolveClientValidation(v *gwv1.FrontendTLSValidation, w *world) clientValidationOutcome {
	var out clientValidationOutcome
	reasons := map[caFault]gwv1.ListenerConditionReason{
		caWrongKind: gwv1.ListenerReasonInvalidCACertificateKind, caNotPermitted: gwv1.ListenerReasonRefNotPermitted,
		caMissing: gwv1.ListenerReasonInvalidCACertificateRef, caNoCertificate: gwv1.ListenerReasonInvalidCACertificateRef,
	}
	bundle := caRefsBundle(v.CACertificateRefs, w.caMaps, func(ref gwv1.ObjectReference) (types.NamespacedName, bool) {
		return readableCA(w.gateway, ref, w.grants)
	}, func(f caFault, msg string) {
		out.missing = out.missing || f == caMissing
		if out.reason == "" {
			out.reason, out.message = string(reasons[f]), msg
		}
	})
	if bundle != nil {
		out.validation = &dataplane.ClientValidation{CAPEM: bundle, InsecureFallback: v.Mode == gwv1.AllowInsecureFallback}
	}
	return out
}

// caFault is why a caCertificateRef gives no certificate authority.
type caFault int

const (
	// caWrongKind: not a ConfigMap.
	caWrongKind caFault = iota + 1
	// caNotPermitted: another namespace's, not granted.
	caNotPermitted
	// caMissing: the ConfigMap does not exist (yet).
	caMissing
	// caNoCertificate: no PEM certificate under ca.crt.
	caNoCertificate
)

// caRefsBundle resolves caCertificateRefs (a Gateway's client validation,
// a BackendTLSPolicy) into one PEM bundle of the usable ones, nil when
// none is: key is the ConfigMap a ConfigMap ref may be read as (false: not
// permitted), and fault is told of each unusable ref, with a message.
func caRefsBundle(refs []gwv1.ObjectReference, caMaps map[types.NamespacedName]*corev1.ConfigMap,
	key func(gwv1.ObjectReference) (types.NamespacedName, bool), fault func(caFault, string)) []byte {
	var bundle []byte
	for _, ref := range refs {
		if ref.Group != "" || ref.Kind != kindConfigMap {
			fault(caWrongKind, fmt.Sprintf("caCertificateRef %s is a %s; only a ConfigMap (key %s) is served", ref.Name, ref.Kind, caCertKey))
			continue
		}
		k, ok := key(ref)
		if !ok {
			fault(caNotPermitted, fmt.Sprintf("no ReferenceGrant in %s allows ConfigMap %s", ptr.Deref(ref.Namespace, ""), ref.Name))
			continue
		}
		cm, ok := caMaps[k]
		if !ok {
			fault(caMissing, fmt.Sprintf("ConfigMap %s not found", k))
			continue
		}
		data := caBundle(cm)
		if data == nil {
			fault(caNoCertificate, fmt.Sprintf("ConfigMap %s holds no PEM certificate under %s", k, caCertKey))
			continue
		}
		bundle = append(bundle, data...)
	}
	return bundle
}

// caBundle is a ConfigMap's ca.crt when it holds only certificates that
// parse, or nil.
func caBundle(cm *corev1.ConfigMap) []byte {
	data := []byte(cm.Data[caCertKey])
	if len(data) == 0 {
		data = cm.BinaryData[caCertKey]
	}
	rest, n := data, 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return nil
		}
		n++
	}
	if n == 0 {
		return nil
	}
	return append([]byte(nil), data...)
}
