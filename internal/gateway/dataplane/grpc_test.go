package dataplane

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/testcert"
)

// grpcEcho is a gRPC backend (the standard health service) that says in
// its response headers who it is and what "foo" header it received.
func grpcEcho(t *testing.T, name string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		foo := ""
		if v := md.Get("foo"); len(v) > 0 {
			foo = v[0]
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs("backend", name, "seen-foo", foo, "remove-me", "yes")); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// TestGRPC proxies gRPC calls, in cleartext with prior knowledge and over
// TLS, by method and header, with header filters, to h2c backends, while
// HTTP/1.1 requests on the same port keep their HTTPRoute rules.
func TestGRPC(t *testing.T) {
	a, b, plain := grpcEcho(t, "a"), grpcEcho(t, "b"), echo(t, "plain")
	one := func(addr string) []Backend { return []Backend{{Address: addr, Weight: 1, H2C: true}} }
	health := "/grpc.health.v1.Health"
	rules := []Rule{
		{GRPC: true, Match: gwv1.HTTPRouteMatch{Path: exact(health + "/Check"), Headers: []gwv1.HTTPHeaderMatch{{Name: "version", Value: "two"}}}, Backends: one(b)},
		{GRPC: true, Match: gwv1.HTTPRouteMatch{Path: exact(health + "/Check"), Headers: []gwv1.HTTPHeaderMatch{{Name: "version", Value: "broken"}}},
			Backends: []Backend{{Weight: 1, Invalid: true}}},
		{GRPC: true, Match: gwv1.HTTPRouteMatch{Path: prefix(health)}, Backends: one(a), Filters: []gwv1.HTTPRouteFilter{
			{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "foo", Value: "set"}}}},
			{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: &gwv1.HTTPHeaderFilter{Remove: []string{"remove-me"}}},
		}},
		{Match: gwv1.HTTPRouteMatch{Path: prefix("/plain")}, Backends: []Backend{{Address: plain, Weight: 1}}},
	}
	certPEM, keyPEM := testcert.SelfSigned(t, "example.com")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{
		{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: rules}}},
		{Port: 443, Protocol: HTTPS, Certificates: []Certificate{{CertPEM: certPEM, KeyPEM: keyPEM}}, Hosts: []VirtualHost{{Rules: rules}}},
	}}); err != nil {
		t.Fatal(err)
	}

	tlsCreds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, ServerName: "example.com"}) //nolint:gosec // the test's own certificate
	for _, listener := range []struct {
		name  string
		addr  string
		creds credentials.TransportCredentials
	}{
		{"h2c", l.at(t, "tcp/80"), insecure.NewCredentials()},
		{"h2 over TLS", l.at(t, "tcp/443"), tlsCreds},
	} {
		t.Run(listener.name, func(t *testing.T) {
			conn, err := grpc.NewClient(listener.addr, grpc.WithTransportCredentials(listener.creds))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			for _, tc := range []struct {
				name     string
				method   string
				md       []string
				code     codes.Code
				backend  string
				seenFoo  string
				removeMe bool
			}{
				{name: "method and header", method: health + "/Check", md: []string{"version", "two", "foo", "sent"}, backend: "b", seenFoo: "sent", removeMe: true},
				{name: "service, with filters", method: health + "/Check", md: []string{"foo", "sent"}, backend: "a", seenFoo: "set"},
				{name: "invalid backend", method: health + "/Check", md: []string{"version", "broken"}, code: codes.Unavailable},
				{name: "no rule", method: "/other.Service/Check", code: codes.Unimplemented},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), tc.md...), 10*time.Second)
					defer cancel()
					var header metadata.MD
					err := conn.Invoke(ctx, tc.method, &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}, grpc.Header(&header))
					if got := status.Code(err); got != tc.code {
						t.Fatalf("status %v (%v), want %v", got, err, tc.code)
					}
					if tc.code != codes.OK {
						return
					}
					if got := header.Get("backend"); len(got) != 1 || got[0] != tc.backend {
						t.Errorf("served by %v, want %s", got, tc.backend)
					}
					if got := header.Get("seen-foo"); len(got) != 1 || got[0] != tc.seenFoo {
						t.Errorf("backend saw foo %v, want %s", got, tc.seenFoo)
					}
					if got := len(header.Get("remove-me")) > 0; got != tc.removeMe {
						t.Errorf("response header remove-me present %v, want %v", got, tc.removeMe)
					}
				})
			}
		})
	}

	// HTTP/1.1 on the same port is routed as before.
	resp, err := http.Get("http://" + l.at(t, "tcp/80") + "/plain")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 1 || resp.Header.Get("X-Backend") != "plain" {
		t.Errorf("HTTP/1.1 request answered over %s by %q, want HTTP/1.1 by plain", resp.Proto, resp.Header.Get("X-Backend"))
	}
}

// TestGRPCStreaming relays a server stream message by message: the health
// service's Watch sends its first status at once and keeps the stream
// open, so the call sees it only if the proxy flushes as it goes.
func TestGRPCStreaming(t *testing.T) {
	backend := grpcEcho(t, "a")
	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{
		{GRPC: true, Backends: []Backend{{Address: backend, Weight: 1, H2C: true}}},
	}}}}}}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(l.at(t, "tcp/80"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("status %v, want SERVING", got.GetStatus())
	}
}

// A GRPCRoute's RequestMirror sends the mirror the call, over h2c: a
// unary call's body is whole once the backend's request has read it.
func TestAGRPCCallIsMirroredOverH2C(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 4)
	mirror := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		calls <- info.FullMethod + " foo=" + strings.Join(md.Get("foo"), ",")
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(mirror, health.NewServer())
	go func() { _ = mirror.Serve(ln) }()
	t.Cleanup(mirror.Stop)

	var l loopback
	p := New(l.options())
	t.Cleanup(p.Close)
	if err := p.Apply(&Config{Ports: []Port{{Port: 80, Protocol: HTTP, Hosts: []VirtualHost{{Rules: []Rule{{
		GRPC: true, Match: gwv1.HTTPRouteMatch{Path: prefix("/grpc.health.v1.Health")},
		Backends: []Backend{{Address: grpcEcho(t, "a"), Weight: 1, H2C: true}},
		Mirrors:  []Mirror{{Address: ln.Addr().String(), H2C: true}},
	}}}}}}}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(l.at(t, "tcp/80"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "foo", "sent"), 10*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err != nil {
		t.Fatalf("call failed: %v", err)
	}
	if got, want := <-calls, "/grpc.health.v1.Health/Check foo=sent"; got != want {
		t.Errorf("mirror received %q, want %q", got, want)
	}
}
