package gateway

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// clientGateway is a Gateway of namespace edge with one HTTP listener and
// ref as its backend client certificate.
func clientGateway(ref gwv1.SecretObjectReference) *gwv1.Gateway {
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw", UID: "gw-uid", Generation: 3},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "outrigger",
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
			TLS:              &gwv1.GatewayTLSConfig{Backend: &gwv1.GatewayBackendTLS{ClientCertificateRef: &ref}},
		},
	}
}

// TestBackendClientCertificateRefs: the clientCertificateRef resolves as
// the specification (and the conformance suite's
// GatewayInvalidTLSBackendConfiguration) asks: the Gateway's ResolvedRefs
// is False with InvalidClientCertificateRef for another group or kind, a
// missing Secret or one without a certificate and key, RefNotPermitted for
// another namespace's without a ReferenceGrant; the Gateway is accepted
// all the same, and its data plane presents no certificate. A usable one
// is in the data plane's programming.
func TestBackendClientCertificateRefs(t *testing.T) {
	ca := testcert.NewCA(t, "clients")
	certPEM, keyPEM := ca.Issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageClientAuth)
	tlsSecret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	}
	secrets := map[types.NamespacedName]*corev1.Secret{}
	for _, s := range []*corev1.Secret{
		tlsSecret("edge", "client"), tlsSecret("shared", "client"), tlsSecret("vault", "client"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "malformed"}, Type: corev1.SecretTypeOpaque},
	} {
		secrets[client.ObjectKeyFromObject(s)] = s
	}
	grants := []*gwv1.ReferenceGrant{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "edge-certs"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "edge"}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
		},
	}}
	ref := func(ns, name string) gwv1.SecretObjectReference {
		r := gwv1.SecretObjectReference{Group: ptr.To(gwv1.Group("")), Kind: ptr.To(gwv1.Kind("Secret")), Name: gwv1.ObjectName(name)}
		if ns != "" {
			r.Namespace = ptr.To(gwv1.Namespace(ns))
		}
		return r
	}
	wrongGroup, wrongKind := ref("", "client"), ref("", "client")
	wrongGroup.Group = ptr.To(gwv1.Group("wrong.group.company.io"))
	wrongKind.Kind = ptr.To(gwv1.Kind("WrongKind"))
	ungrantedKind := ref("vault", "client")
	ungrantedKind.Kind = ptr.To(gwv1.Kind("ConfigMap"))
	for name, tc := range map[string]struct {
		ref     gwv1.SecretObjectReference
		reason  gwv1.GatewayConditionReason
		missing bool
	}{
		"own namespace": {ref: ref("", "client"), reason: gwv1.GatewayReasonResolvedRefs},
		"granted":       {ref: ref("shared", "client"), reason: gwv1.GatewayReasonResolvedRefs},
		"not granted":   {ref: ref("vault", "client"), reason: gwv1.GatewayReasonRefNotPermitted},
		"missing":       {ref: ref("", "nonexistent"), reason: gwv1.GatewayReasonInvalidClientCertificateRef, missing: true},
		"malformed":     {ref: ref("", "malformed"), reason: gwv1.GatewayReasonInvalidClientCertificateRef},
		"another group": {ref: wrongGroup, reason: gwv1.GatewayReasonInvalidClientCertificateRef},
		"another kind":  {ref: wrongKind, reason: gwv1.GatewayReasonInvalidClientCertificateRef},
		// Not a Secret comes first: what is not one is never read.
		"another kind, not granted": {ref: ungrantedKind, reason: gwv1.GatewayReasonInvalidClientCertificateRef},
	} {
		t.Run(name, func(t *testing.T) {
			res := compile(&world{controller: goldenController, kinds: servedKinds(false, false), gateway: clientGateway(tc.ref), secrets: secrets, grants: grants})
			ok := tc.reason == gwv1.GatewayReasonResolvedRefs
			want := cond(string(gwv1.GatewayConditionResolvedRefs), ok, string(tc.reason), "", 3)
			got := res.resolvedRefs
			got.Message = ""
			if got != want {
				t.Errorf("ResolvedRefs %+v, want %+v", res.resolvedRefs, want)
			}
			if !ok && res.resolvedRefs.Message == "" {
				t.Error("ResolvedRefs False without a message saying why")
			}
			if res.accepted.Status != metav1.ConditionTrue || res.accepted.Reason != string(gwv1.GatewayReasonAccepted) {
				t.Errorf("Accepted %+v, want True/Accepted whatever the client certificate", res.accepted)
			}
			if len(res.config.Ports) != 1 {
				t.Errorf("%d ports programmed, want the HTTP listener's", len(res.config.Ports))
			}
			switch c := res.config.BackendClientCertificate; {
			case ok && (c == nil || string(c.CertPEM) != string(certPEM) || string(c.KeyPEM) != string(keyPEM)):
				t.Errorf("backend client certificate %v, want the Secret's", c)
			case !ok && c != nil:
				t.Error("an unusable ref gave a backend client certificate")
			}
			if res.missingSecrets != tc.missing {
				t.Errorf("missingSecrets %v, want %v", res.missingSecrets, tc.missing)
			}
			if !res.backendClient {
				t.Error("a Gateway naming a client certificate is not read again")
			}
			if err := dataplane.Check(&res.config); err != nil {
				t.Errorf("the data plane refuses the programming: %v", err)
			}
		})
	}
	t.Run("a listener not resolved, the client certificate usable", func(t *testing.T) {
		gw := clientGateway(ref("", "client"))
		gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType,
			TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{ref("", "nonexistent")}}})
		res := compile(&world{controller: goldenController, kinds: servedKinds(false, false), gateway: gw, secrets: secrets, grants: grants})
		if res.resolvedRefs.Status != metav1.ConditionFalse || res.resolvedRefs.Reason != string(gwv1.GatewayReasonListenersNotResolved) {
			t.Errorf("ResolvedRefs %+v, want False/ListenersNotResolved", res.resolvedRefs)
		}
		if res.config.BackendClientCertificate == nil {
			t.Error("the usable client certificate is not programmed")
		}
	})
	t.Run("none asked", func(t *testing.T) {
		gw := clientGateway(ref("", "client"))
		gw.Spec.TLS = nil
		res := compile(&world{controller: goldenController, kinds: servedKinds(false, false), gateway: gw})
		if res.resolvedRefs.Status != metav1.ConditionTrue || res.config.BackendClientCertificate != nil || res.backendClient {
			t.Errorf("ResolvedRefs %+v, certificate %v, reread %v: want True, none, no", res.resolvedRefs, res.config.BackendClientCertificate, res.backendClient)
		}
	})
}

// TestBackendClientCertificateReadOnlyWhenGranted: the reconciler reads
// the clientCertificateRef's Secret only where it may (its namespace, or
// a granted one), so a Gateway cannot have Outrigger read, or probe for,
// another namespace's Secret; the Gateway's status says RefNotPermitted.
func TestBackendClientCertificateReadOnlyWhenGranted(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		ns, reason string
		read       []string
	}{
		"own namespace": {reason: string(gwv1.GatewayReasonResolvedRefs), read: []string{"edge/client"}},
		"granted":       {ns: "shared", reason: string(gwv1.GatewayReasonResolvedRefs), read: []string{"shared/client"}},
		"not granted":   {ns: "vault", reason: string(gwv1.GatewayReasonRefNotPermitted)},
	} {
		t.Run(name, func(t *testing.T) {
			ref := gwv1.SecretObjectReference{Name: "client"}
			if tc.ns != "" {
				ref.Namespace = ptr.To(gwv1.Namespace(tc.ns))
			}
			gw := clientGateway(ref)
			grant := &gwv1.ReferenceGrant{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "edge-certs"},
				Spec: gwv1.ReferenceGrantSpec{
					From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "edge"}},
					To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: ptr.To(gwv1.ObjectName("client"))}},
				},
			}
			ca := testcert.NewCA(t, "clients")
			certPEM, keyPEM := ca.Issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageClientAuth)
			objs := []client.Object{
				&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "outrigger"}, Spec: gwv1.GatewayClassSpec{ControllerName: goldenController}},
				gw, grant,
			}
			for _, ns := range []string{"edge", "shared", "vault"} {
				objs = append(objs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"}, Type: corev1.SecretTypeTLS,
					Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}})
			}
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
				WithStatusSubresource(&gwv1.Gateway{}, &corev1.Service{}).Build()
			reader := &countingReader{Reader: c}
			r := &reconciler{client: c, reader: reader, own: c, recorder: record.NewFakeRecorder(100), kinds: servedKinds(false, false),
				opts: Options{ControllerName: goldenController, Namespace: DefaultNamespace}}
			r.serving = &dataPlaneServing{r: r}
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gw)}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(reader.read, tc.read) {
				t.Errorf("Secrets read %v, want only %v", reader.read, tc.read)
			}
			var got gwv1.Gateway
			if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
				t.Fatal(err)
			}
			if rc := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionResolvedRefs)); rc == nil || rc.Reason != tc.reason {
				t.Errorf("ResolvedRefs %+v, want reason %s", rc, tc.reason)
			}
		})
	}
}
