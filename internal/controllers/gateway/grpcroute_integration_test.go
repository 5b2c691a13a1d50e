//go:build integration

package gateway_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestGRPCRoute: a GRPCRoute attaches to an HTTP listener (which lists
// the kind as supported), its parent conditions are written, a younger
// HTTPRoute sharing its hostnames is not accepted, and the data plane
// programmed from the Secret proxies a gRPC call by its method to the
// backend over h2c.
func TestGRPCRoute(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns := namespace(t, c)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	go func() { _ = backend.Serve(ln) }()
	t.Cleanup(backend.Stop)
	svc := service(ns, "grpc", corev1.ProtocolTCP, 8080)
	svc.Spec.Ports[0].AppProtocol = ptr.To("kubernetes.io/h2c")
	create(t, c, svc)
	clusterIP := net.JoinHostPort(svc.Spec.ClusterIP, "8080")

	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}},
		},
	}
	gr := &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a-grpc"},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gwv1.Hostname{"grpc.example.com"},
			Rules: []gwv1.GRPCRouteRule{{
				Matches:     []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: ptr.To("grpc.health.v1.Health"), Method: ptr.To("Check")}}},
				BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: backendRef("grpc", 8080)}},
			}},
		},
	}
	// Created with or after the GRPCRoute, and after it by name: the
	// younger of the two, on every hostname.
	web := httpRoute(ns, "z-web", "gw", "/")
	create(t, c, gw, gr, web)

	testenv.Eventually(t, time.Minute, "GRPCRoute accepted and resolved, the HTTPRoute refused", func() (bool, error) {
		var got gwv1.GRPCRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(gr), &got); err != nil {
			return false, err
		}
		for _, typ := range []string{string(gwv1.RouteConditionAccepted), string(gwv1.RouteConditionResolvedRefs)} {
			if rc := parentCondition(got.Status.Parents, "gw", typ); rc == nil || rc.Status != metav1.ConditionTrue {
				return false, nil
			}
		}
		var hr gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(web), &hr); err != nil {
			return false, err
		}
		rc := parentCondition(hr.Status.Parents, "gw", string(gwv1.RouteConditionAccepted))
		return rc != nil && rc.Status == metav1.ConditionFalse && rc.Reason == string(gwv1.RouteReasonNotAllowedByListeners), nil
	})
	attachedListener(t, c, gw, "GRPCRoute")

	// The data plane serves the call.
	addr := servedByDataPlane(t, ns, "gw", clusterIP, ln.Addr().String())
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("grpc.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	if resp, err := hc.Check(callCtx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check through the Gateway: %v %v, want SERVING", resp, err)
	}
	// Watch is not matched: no rule takes it.
	stream, err := hc.Watch(callCtx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch through the Gateway: %v, want Unimplemented", err)
	}
}
