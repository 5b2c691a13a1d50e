//go:build integration

package gateway_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestTLSRoute: Outrigger, started as a cluster runs it, watches
// TLSRoutes: a Passthrough listener lists TLSRoute as its kind, a TLSRoute
// naming it is accepted and resolved, one whose hostname the listener does
// not have is not (NoMatchingListenerHostname), and the data plane
// programmed from the Secret sends a TLS client naming the route's host to
// the backend, which terminates TLS itself.
func TestTLSRoute(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns := namespace(t, c)

	// The backend terminates TLS and says which server name it was asked.
	certPEM, keyPEM := testcert.SelfSigned(t, "app.example.com")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				if tc.Handshake() == nil {
					_, _ = io.WriteString(tc, "backend "+tc.ConnectionState().ServerName+"\n")
				}
			}()
		}
	}()
	svc := service(ns, "app", corev1.ProtocolTCP, 8443)
	create(t, c, svc)
	clusterIP := net.JoinHostPort(svc.Spec.ClusterIP, "8443")

	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{{
				Name: "tls", Port: 443, Protocol: gwv1.TLSProtocolType, Hostname: ptr.To(gwv1.Hostname("*.example.com")),
				TLS: &gwv1.ListenerTLSConfig{Mode: ptr.To(gwv1.TLSModePassthrough)},
			}},
		},
	}
	tlsRoute := func(name string, host gwv1.Hostname) *gwv1.TLSRoute {
		return &gwv1.TLSRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gwv1.TLSRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Hostnames:       []gwv1.Hostname{host},
				Rules:           []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{backendRef("app", 8443)}}},
			},
		}
	}
	app, elsewhere := tlsRoute("app", "app.example.com"), tlsRoute("elsewhere", "app.example.org")
	create(t, c, gw, app, elsewhere)

	testenv.Eventually(t, time.Minute, "the TLSRoute accepted and resolved, the other refused", func() (bool, error) {
		var got, other gwv1.TLSRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), &got); err != nil {
			return false, err
		}
		for _, typ := range []string{string(gwv1.RouteConditionAccepted), string(gwv1.RouteConditionResolvedRefs)} {
			if rc := parentCondition(got.Status.Parents, "gw", typ); rc == nil || rc.Status != metav1.ConditionTrue {
				return false, nil
			}
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(elsewhere), &other); err != nil {
			return false, err
		}
		rc := parentCondition(other.Status.Parents, "gw", string(gwv1.RouteConditionAccepted))
		return rc != nil && rc.Status == metav1.ConditionFalse && rc.Reason == string(gwv1.RouteReasonNoMatchingListenerHostname), nil
	})
	attachedListener(t, c, gw, "TLSRoute")

	// The data plane passes the TLS stream through to the backend.
	addr := servedByDataPlane(t, ns, "gw", clusterIP, ln.Addr().String())
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.com"}) //nolint:gosec // the backend's own certificate
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "backend app.example.com" {
		t.Errorf("through the Gateway: %q, %v; want the backend's greeting for app.example.com", line, err)
	}
	if peer := conn.ConnectionState().PeerCertificates; len(peer) == 0 || peer[0].Subject.CommonName != "app.example.com" && !slices.Contains(peer[0].DNSNames, "app.example.com") {
		t.Errorf("the handshake was not the backend's")
	}
}
