//go:build integration

package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestGatewayBackendClientCertificate: Outrigger, started as a cluster
// runs it, has the data plane present the Gateway's
// spec.tls.backend.clientCertificateRef to a backend of a
// BackendTLSPolicy that requires a client certificate: the Secret of the
// Gateway's namespace is presented (ResolvedRefs True); one of another
// namespace without a ReferenceGrant is not (ResolvedRefs
// False/RefNotPermitted, the Gateway still accepted and serving, the
// backend refusing it: 503); with the grant, that namespace's is.
func TestGatewayBackendClientCertificate(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns, vault := namespace(t, c), namespace(t, c)

	// The backend serves web.example.com over TLS to clients whose
	// certificate clientCA issued, and says whose it saw.
	serverCA, clientCA := testcert.NewCA(t, "backends"), testcert.NewCA(t, "gateway clients")
	certPEM, keyPEM := serverCA.IssueServer(t, []string{"web.example.com"})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(clientCA.PEM)
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "client %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	backend.StartTLS()
	t.Cleanup(backend.Close)

	clientSecret := func(ns, cn string) *corev1.Secret {
		certPEM, keyPEM := clientCA.Issue(t, pkix.Name{CommonName: cn}, x509.ExtKeyUsageClientAuth)
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
	}
	svc := service(ns, "web", corev1.ProtocolTCP, 443)
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
		Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		TLS: &gwv1.GatewayTLSConfig{Backend: &gwv1.GatewayBackendTLS{
			ClientCertificateRef: &gwv1.SecretObjectReference{Kind: ptr.To(gwv1.Kind("Secret")), Name: "client"},
		}},
	}}
	create(t, c, svc, clientSecret(ns, "own"), clientSecret(vault, "vault's"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-ca"}, Data: map[string]string{"ca.crt": string(serverCA.PEM)}},
		&gwv1.BackendTLSPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"}, Spec: gwv1.BackendTLSPolicySpec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "web"}}},
			Validation: gwv1.BackendTLSPolicyValidation{CACertificateRefs: []gwv1.LocalObjectReference{{Kind: "ConfigMap", Name: "web-ca"}}, Hostname: "web.example.com"},
		}},
		httpRoute(ns, "r", "gw", "/", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 443)}), gw)

	conditions := func(resolved gwv1.GatewayConditionReason) func() (bool, error) {
		return func() (bool, error) {
			var got gwv1.Gateway
			if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
				return false, err
			}
			rc := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionResolvedRefs))
			ac := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionAccepted))
			return rc != nil && rc.Reason == string(resolved) && rc.ObservedGeneration == got.Generation &&
				(rc.Status == metav1.ConditionTrue) == (resolved == gwv1.GatewayReasonResolvedRefs) &&
				ac != nil && ac.Status == metav1.ConditionTrue && ac.Reason == string(gwv1.GatewayReasonAccepted), nil
		}
	}
	testenv.Eventually(t, time.Minute, "the Gateway ResolvedRefs with its own namespace's Secret", conditions(gwv1.GatewayReasonResolvedRefs))

	addr := servedByDataPlane(t, ns, "gw", net.JoinHostPort(svc.Spec.ClusterIP, "443"), strings.TrimPrefix(backend.URL, "https://"))
	// answers says whether a request through the data plane has the
	// status code and, for 200, the client certificate the backend saw.
	answers := func(code int, client string) func() (bool, error) {
		return func() (bool, error) {
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				return false, nil //nolint:nilerr // the data plane may not be programmed yet
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return false, nil //nolint:nilerr // as above
			}
			return resp.StatusCode == code && (code != http.StatusOK || string(body) == "client "+client), nil
		}
	}
	testenv.Eventually(t, time.Minute, "the backend shown the own namespace's certificate", answers(http.StatusOK, "own"))

	// Another namespace's Secret, not granted: not presented (nor read),
	// the Gateway says why and serves on.
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatal(err)
	}
	gw.Spec.TLS.Backend.ClientCertificateRef.Namespace = ptr.To(gwv1.Namespace(vault))
	if err := c.Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the Gateway RefNotPermitted without a ReferenceGrant", conditions(gwv1.GatewayReasonRefNotPermitted))
	testenv.Eventually(t, time.Minute, "the backend, shown no certificate, refusing the Gateway", answers(http.StatusServiceUnavailable, ""))

	create(t, c, &gwv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: vault, Name: "gateways"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: gwv1.Namespace(ns)}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: ptr.To(gwv1.ObjectName("client"))}},
		},
	})
	testenv.Eventually(t, time.Minute, "the Gateway ResolvedRefs with the grant", conditions(gwv1.GatewayReasonResolvedRefs))
	testenv.Eventually(t, time.Minute, "the backend shown the granted namespace's certificate", answers(http.StatusOK, "vault's"))
}
