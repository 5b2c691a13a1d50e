package gateway

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	fail := func(reason gwv1.ListenerConditionReason, format string, args ...any) {
		if out.reason == "" {
			out.reason, out.message = string(reason), fmt.Sprintf(format, args...)
		}
	}
	var bundle []byte
	gw := w.gateway
	for _, ref := range v.CACertificateRefs {
		if ref.Group != "" || ref.Kind != kindConfigMap {
			fail(gwv1.ListenerReasonInvalidCACertificateKind, "caCertificateRef %s is a %s; only a ConfigMap (key %s) is served", ref.Name, ref.Kind, caCertKey)
			continue
		}
		key, ok := readableCA(gw, ref, w.grants)
		if !ok {
			fail(gwv1.ListenerReasonRefNotPermitted, "no ReferenceGrant in %s allows ConfigMap %s", string(*ref.Namespace), ref.Name)
			continue
		}
		cm, ok := w.caMaps[key]
		if !ok {
			out.missing = true
			fail(gwv1.ListenerReasonInvalidCACertificateRef, "ConfigMap %s not found", key)
			continue
		}
		data := caBundle(cm)
		if data == nil {
			fail(gwv1.ListenerReasonInvalidCACertificateRef, "ConfigMap %s holds no PEM certificate under %s", key, caCertKey)
			continue
		}
		bundle = append(bundle, data...)
	}
	if bundle != nil {
		out.validation = &dataplane.ClientValidation{CAPEM: bundle, InsecureFallback: v.Mode == gwv1.AllowInsecureFallback}
	}
	return out
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
