package gateway

import (
	"crypto/tls"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// A Gateway's spec.tls.backend.clientCertificateRef is the certificate its
// data plane presents to the backends it reaches over TLS (those of a
// BackendTLSPolicy). The Secret is read as a listener's certificate is
// (gather.go): from the API, only in the Gateway's namespace or one whose
// ReferenceGrant allows it, never cached, and again every
// certificateRecheck. A ref that cannot be used says why in the Gateway's
// ResolvedRefs condition; the Gateway is still accepted and serves, its
// TLS backends reached without a client certificate (one requiring it
// refuses them), as the specification keeps the condition apart from
// Accepted and Programmed.

// backendClientRef is the Gateway's clientCertificateRef, nil none.
func backendClientRef(gw *gwv1.Gateway) *gwv1.SecretObjectReference {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Backend == nil {
		return nil
	}
	return gw.Spec.TLS.Backend.ClientCertificateRef
}

// backendClientOutcome is what the clientCertificateRef resolves to: the
// certificate (nil: none usable, or none asked), else the Gateway's
// ResolvedRefs reason and message, and whether the Secret does not exist
// (yet).
type backendClientOutcome struct {
	cert            *dataplane.Certificate
	reason, message string
	missing         bool
}

// resolveBackendClient resolves the Gateway's clientCertificateRef as the
// specification asks: a ref to another group or kind, a Secret that does
// not exist or holds no certificate and key under tls.crt and tls.key is
// InvalidClientCertificateRef; another namespace's Secret without a
// ReferenceGrant is RefNotPermitted (and was never read: readableSecret
// is what gather reads by).
func resolveBackendClient(w *world) backendClientOutcome {
	ref := backendClientRef(w.gateway)
	if ref == nil {
		return backendClientOutcome{}
	}
	invalid := func(msg string, args ...any) backendClientOutcome {
		return backendClientOutcome{reason: string(gwv1.GatewayReasonInvalidClientCertificateRef), message: fmt.Sprintf(msg, args...)}
	}
	if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != kindSecret) {
		return invalid("clientCertificateRef %s is not a Secret; only a Secret (keys %s and %s) is served", ref.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	key, ok := readableSecret(w.gateway.Namespace, kindGateway, *ref, w.grants)
	if !ok {
		return backendClientOutcome{reason: string(gwv1.GatewayReasonRefNotPermitted),
			message: fmt.Sprintf("no ReferenceGrant in %s allows Secret %s", ptr.Deref(ref.Namespace, ""), ref.Name)}
	}
	s, ok := w.secrets[key]
	if !ok {
		out := invalid("Secret %s not found", key)
		out.missing = true
		return out
	}
	return backendClientCertificate(key, s)
}

// backendClientCertificate is a Secret's certificate and key when they
// make a pair.
func backendClientCertificate(key types.NamespacedName, s *corev1.Secret) backendClientOutcome {
	certPEM, keyPEM := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return backendClientOutcome{reason: string(gwv1.GatewayReasonInvalidClientCertificateRef),
			message: fmt.Sprintf("Secret %s holds no valid certificate and key under %s and %s: %v", key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)}
	}
	return backendClientOutcome{cert: &dataplane.Certificate{CertPEM: certPEM, KeyPEM: keyPEM}}
}

// gatewayResolvedRefs is the Gateway's ResolvedRefs condition: False with
// the backend client certificate's reason when it cannot be used (the one
// reference the Gateway holds outside its listeners), else
// ListenersNotResolved when a listener's references do not resolve, else
// True.
func gatewayResolvedRefs(listeners []gwv1.ListenerStatus, bc backendClientOutcome, gen int64) metav1.Condition {
	t := string(gwv1.GatewayConditionResolvedRefs)
	if bc.reason != "" {
		return cond(t, false, bc.reason, bc.message, gen)
	}
	unresolved := slices.ContainsFunc(listeners, func(l gwv1.ListenerStatus) bool {
		return meta.IsStatusConditionFalse(l.Conditions, string(gwv1.ListenerConditionResolvedRefs))
	})
	if unresolved {
		return cond(t, false, string(gwv1.GatewayReasonListenersNotResolved), "a listener's references do not resolve; see its ResolvedRefs", gen)
	}
	return cond(t, true, string(gwv1.GatewayReasonResolvedRefs), "", gen)
}
