package local

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// firstBytes is a node port that records the first n bytes of each
// connection on got.
func firstBytes(t *testing.T, ip string, port, n int) <-chan []byte {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, n)
				k, _ := io.ReadFull(c, b)
				got <- b[:k]
			}()
		}
	}()
	return got
}

// within is the next value on ch, failing the test when none comes
// within 10 s.
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing reached the backend within 10 s")
		var zero T
		return zero
	}
}

// send dials vip:port from the local address from and sends msg.
func send(t *testing.T, vip string, port int, from, msg string) {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", net.JoinHostPort(vip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
}

// A Service annotated local.outrigger.dev/proxy-protocol: "v2" has each
// TCP connection reach its backend behind a version 2 header naming the
// client and the VIP; without the annotation the backend receives the
// client's bytes alone.
func TestProxyProtocolHeaderIsSentWhenAnnotated(t *testing.T) {
	np := freeport.Get(t)
	got := firstBytes(t, "127.0.0.41", np, 28+4)
	lbs := newProvider(t, "pool: 127.0.104.0/24\nhealthCheck: {disabled: true}\n")
	node := (&fakeNode{name: "node-pp", ip: "127.0.0.41"}).node()
	ctx := context.Background()

	svc := service("proxyproto", tcpPort(8080, np))
	svc.Annotations = map[string]string{AnnotationProxyProtocol: "v2"}
	st, err := lbs.EnsureLoadBalancer(ctx, "c", svc, []*corev1.Node{node})
	if err != nil {
		t.Fatal(err)
	}
	vip := st.Ingress[0].IP
	send(t, vip, 8080, "127.0.0.42", "ping")
	b := within(t, got)
	if len(b) != 32 || !bytes.Equal(b[:12], v2Signature) || b[12] != 0x21 || b[13] != 0x11 || binary.BigEndian.Uint16(b[14:]) != 12 {
		t.Fatalf("backend received %q, want a version 2 PROXY TCP4 header", b)
	}
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), binary.BigEndian.Uint16(b[24:]))
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[20:24])), binary.BigEndian.Uint16(b[26:]))
	if src.Addr() != netip.MustParseAddr("127.0.0.42") || src.Port() == 0 {
		t.Errorf("header's source %v, want the client 127.0.0.42", src)
	}
	if dst != netip.AddrPortFrom(netip.MustParseAddr(vip), 8080) {
		t.Errorf("header's destination %v, want the VIP %s:8080", dst, vip)
	}
	if string(b[28:]) != "ping" {
		t.Errorf("after the header came %q, want the client's \"ping\"", b[28:])
	}

	delete(svc.Annotations, AnnotationProxyProtocol)
	if _, err := lbs.EnsureLoadBalancer(ctx, "c", svc, []*corev1.Node{node}); err != nil {
		t.Fatal(err)
	}
	send(t, vip, 8080, "127.0.0.42", strings.Repeat("p", 32))
	if b := within(t, got); string(b) != strings.Repeat("p", 32) {
		t.Errorf("without the annotation the backend received %q, want the client's bytes alone", b)
	}
}

// Any value but "v2", and the annotation with the nodes data plane (which
// cannot send a header), is refused as an invalid annotation, naming it.
func TestProxyProtocolAnnotationIsReadStrictly(t *testing.T) {
	for _, tc := range []struct {
		value string
		proxy bool
	}{
		{value: "v1", proxy: true},
		{value: "true", proxy: true},
		{value: "", proxy: true},
		{value: "V2", proxy: true},
		{value: "v2", proxy: false},
	} {
		t.Run(fmt.Sprintf("%q proxy data plane %v", tc.value, tc.proxy), func(t *testing.T) {
			svc := service("pp", tcpPort(80, 30080))
			svc.Annotations = map[string]string{AnnotationProxyProtocol: tc.value}
			_, err := configFor(svc, tc.proxy)
			if err == nil || cloud.Reason(err) != provider.ReasonInvalidAnnotation || !strings.Contains(err.Error(), AnnotationProxyProtocol) {
				t.Fatalf("err %v (reason %q), want %s naming %s", err, cloud.Reason(err), provider.ReasonInvalidAnnotation, AnnotationProxyProtocol)
			}
		})
	}
}

// The whole way, as a cluster with the local provider runs a Gateway with
// proxyProtocol: a client on its own loopback address reaches the VIP,
// the local provider relays it with a PROXY header to the node port where
// Outrigger's data plane listens, and the backend behind the data plane
// learns the client's address, not the load balancer's.
func TestProxyProtocolFromTheVIPToTheBackend(t *testing.T) {
	seen := make(chan http.Header, 1)
	backendLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = backend.Serve(backendLn) }()
	t.Cleanup(func() { _ = backend.Close() })

	np := freeport.Get(t)
	dp := dataplane.New(dataplane.Options{ListenTCP: func(int32) (net.Listener, error) {
		return net.Listen("tcp", net.JoinHostPort("127.0.0.43", strconv.Itoa(np)))
	}})
	t.Cleanup(dp.Close)
	prefix := gwv1.PathMatchPathPrefix
	slash := "/"
	if err := dp.Apply(&dataplane.Config{Settings: &dataplane.Settings{ProxyProtocol: true}, Ports: []dataplane.Port{{
		Port: 80, Protocol: dataplane.HTTP,
		Hosts: []dataplane.VirtualHost{{Rules: []dataplane.Rule{{
			Match:    gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &slash}},
			Backends: []dataplane.Backend{{Address: backendLn.Addr().String(), Weight: 1}},
		}}}},
	}}}); err != nil {
		t.Fatal(err)
	}

	lbs := newProvider(t, "pool: 127.0.105.0/24\nhealthCheck: {disabled: true}\n")
	svc := service("gateway", tcpPort(8080, np))
	svc.Annotations = map[string]string{AnnotationProxyProtocol: "v2"}
	st, err := lbs.EnsureLoadBalancer(context.Background(), "c", svc, []*corev1.Node{(&fakeNode{name: "node-gw", ip: "127.0.0.43"}).node()})
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.44")}, Timeout: 2 * time.Second}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	resp, err := client.Get("http://" + net.JoinHostPort(st.Ingress[0].IP, "8080") + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := within(t, seen)
	if got := h.Get("X-Real-Ip"); got != "127.0.0.44" {
		t.Errorf("X-Real-IP %q, want the client's 127.0.0.44", got)
	}
	if got := h.Get("X-Forwarded-For"); got != "127.0.0.44" {
		t.Errorf("X-Forwarded-For %q, want the client's 127.0.0.44", got)
	}
}
