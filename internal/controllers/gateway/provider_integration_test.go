//go:build integration

package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestGatewayThroughTheProvider runs the gateway and service controllers
// with the sim provider on a real API server: the provider's class is
// accepted; a Gateway with HTTP, TCP and an HTTPS listener whose
// certificate is missing gets a load balancer through the provider's
// ordinary calls (tagged with the Service's UID), its address in status,
// each listener the conditions the specification names; routes get
// their parent conditions, a cross-namespace backend waits for a
// ReferenceGrant; the data plane, programmed from what Outrigger stored,
// routes traffic to the right backends; a Gateway of another class is not
// touched; deleting the Gateway deletes the load balancer.
func TestGatewayThroughTheProvider(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller")
	ns, other := namespace(t, c), namespace(t, c)

	class := gateway.ClassNameFor("sim", "")
	testenv.Eventually(t, time.Minute, "GatewayClass accepted", func() (bool, error) {
		var gc gwv1.GatewayClass
		if err := c.Get(ctx, types.NamespacedName{Name: class}, &gc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionTrue(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted)) &&
			len(gc.Status.SupportedFeatures) == len(gateway.SupportedFeatures), nil
	})

	// Backends: Services whose cluster IPs the test's data plane maps to
	// servers on loopback.
	backends := map[string]string{}
	for _, name := range []string{"web-a", "web-b", "web-other"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, name)
		}))
		t.Cleanup(srv.Close)
		backends[name] = strings.TrimPrefix(srv.URL, "http://")
	}
	tcpEcho, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcpEcho.Close() })
	go func() {
		for {
			conn, err := tcpEcho.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); _, _ = io.Copy(conn, conn) }()
		}
	}()
	backends["echo"] = tcpEcho.Addr().String()
	webOther := service(other, "web-other", corev1.ProtocolTCP, 8080)
	svcs := []*corev1.Service{service(ns, "web-a", corev1.ProtocolTCP, 8080), service(ns, "web-b", corev1.ProtocolTCP, 8080), webOther, service(ns, "echo", corev1.ProtocolTCP, 9000)}
	for _, s := range svcs {
		create(t, c, s)
	}
	clusterIPs := map[string]string{}
	for _, s := range svcs {
		clusterIPs[net.JoinHostPort(s.Spec.ClusterIP, fmt.Sprint(s.Spec.Ports[0].Port))] = backends[s.Name]
	}

	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(class),
			Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "tcp", Port: 9000, Protocol: gwv1.TCPProtocolType},
				{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, TLS: &gwv1.ListenerTLSConfig{
					CertificateRefs: []gwv1.SecretObjectReference{{Name: "missing-cert"}}}},
			},
		},
	}
	foreign := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("foreign")},
		Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/another-controller"}}
	foreignGW := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-ours"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(foreign.Name), Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	crossNS := backendRef("web-other", 8080)
	crossNS.Namespace = ptr.To(gwv1.Namespace(other))
	create(t, c, foreign, foreignGW, gw,
		httpRoute(ns, "route-a", "gw", "/a", gwv1.HTTPBackendRef{BackendRef: backendRef("web-a", 8080)}),
		httpRoute(ns, "route-b", "gw", "/b", gwv1.HTTPBackendRef{BackendRef: backendRef("web-b", 8080)}),
		httpRoute(ns, "route-other", "gw", "/other", gwv1.HTTPBackendRef{BackendRef: crossNS}),
		&gwv1.TCPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tcp"},
			Spec: gwv1.TCPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName("tcp"))}}},
				Rules:           []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{backendRef("echo", 9000)}}},
			},
		},
	)

	// The cross-namespace backend is refused until a ReferenceGrant.
	testenv.Eventually(t, time.Minute, "route-other refused for want of a ReferenceGrant", func() (bool, error) {
		var hr gwv1.HTTPRoute
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "route-other"}, &hr); err != nil {
			return false, err
		}
		rc := parentCondition(hr.Status.Parents, "gw", string(gwv1.RouteConditionResolvedRefs))
		return rc != nil && rc.Status == metav1.ConditionFalse && rc.Reason == string(gwv1.RouteReasonRefNotPermitted), nil
	})
	create(t, c, &gwv1.ReferenceGrant{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "allow"},
		Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "HTTPRoute", Namespace: gwv1.Namespace(ns)}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Service"}},
		},
	})

	var programmed gwv1.Gateway
	testenv.Eventually(t, time.Minute, "Gateway programmed with routes attached and resolved", func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &programmed); err != nil {
			return false, err
		}
		if !meta.IsStatusConditionTrue(programmed.Status.Conditions, string(gwv1.GatewayConditionProgrammed)) || len(programmed.Status.Listeners) != 3 {
			return false, nil
		}
		for _, name := range []string{"route-a", "route-b", "route-other"} {
			var hr gwv1.HTTPRoute
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &hr); err != nil {
				return false, err
			}
			for _, typ := range []string{string(gwv1.RouteConditionAccepted), string(gwv1.RouteConditionResolvedRefs)} {
				if rc := parentCondition(hr.Status.Parents, "gw", typ); rc == nil || rc.Status != metav1.ConditionTrue {
					return false, nil
				}
			}
		}
		return programmed.Status.Listeners[0].AttachedRoutes == 3, nil
	})

	// Accepted, with one listener invalid; the invalid one says why.
	if a := meta.FindStatusCondition(programmed.Status.Conditions, string(gwv1.GatewayConditionAccepted)); a == nil || a.Status != metav1.ConditionTrue || a.Reason != string(gwv1.GatewayReasonListenersNotValid) {
		t.Errorf("Gateway Accepted = %+v, want True/ListenersNotValid", a)
	}
	for _, ls := range programmed.Status.Listeners {
		wantProgrammed, wantAttached := metav1.ConditionTrue, int32(1)
		switch ls.Name {
		case "https":
			// Not programmed, yet routes attach and count while its
			// certificate is missing, as the specification asks.
			wantProgrammed, wantAttached = metav1.ConditionFalse, 3
			if rr := meta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionResolvedRefs)); rr == nil || rr.Reason != string(gwv1.ListenerReasonInvalidCertificateRef) {
				t.Errorf("https listener ResolvedRefs = %+v, want InvalidCertificateRef", rr)
			}
		case "http":
			wantAttached = 3
		}
		if p := meta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionProgrammed)); p == nil || p.Status != wantProgrammed {
			t.Errorf("listener %s Programmed = %+v, want %s", ls.Name, p, wantProgrammed)
		}
		if ls.AttachedRoutes != wantAttached {
			t.Errorf("listener %s attachedRoutes = %d, want %d", ls.Name, ls.AttachedRoutes, wantAttached)
		}
	}

	// The address is the provider's: the load balancer the sim cloud
	// holds for the Gateway's Service, recorded with that Service's UID.
	dpKey := types.NamespacedName{Namespace: gateway.DefaultNamespace, Name: gateway.DataPlaneName(ns, "gw")}
	var lbSvc corev1.Service
	if err := c.Get(ctx, dpKey, &lbSvc); err != nil {
		t.Fatal(err)
	}
	if len(programmed.Status.Addresses) != 1 || len(lbSvc.Status.LoadBalancer.Ingress) != 1 || programmed.Status.Addresses[0].Value != lbSvc.Status.LoadBalancer.Ingress[0].IP {
		t.Fatalf("Gateway addresses %v, the Service's load balancer %v", programmed.Status.Addresses, lbSvc.Status.LoadBalancer.Ingress)
	}
	lbs := cloud.LoadBalancers()
	if len(lbs) != 1 || lbs[0].VIP != lbSvc.Status.LoadBalancer.Ingress[0].IP || !strings.Contains(fmt.Sprint(lbs[0].Tags), string(lbSvc.UID)) {
		t.Fatalf("cloud load balancers %+v, want one at %s tagged with Service UID %s", lbs, lbSvc.Status.LoadBalancer.Ingress[0].IP, lbSvc.UID)
	}
	if len(lbs[0].Listeners) != 2 {
		t.Errorf("load balancer listeners %+v, want HTTP 80 and TCP 9000 (not the invalid HTTPS one)", lbs[0].Listeners)
	}

	// The data plane, watching the Secret Outrigger keeps (as
	// `outrigger gateway-dataplane` does), routes traffic.
	listening := map[int32]string{}
	var mu sync.Mutex
	proxy := dataplane.New(dataplane.Options{
		ListenTCP: func(port int32) (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				mu.Lock()
				listening[port] = l.Addr().String()
				mu.Unlock()
			}
			return l, err
		},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			to, ok := clusterIPs[address]
			if !ok {
				return nil, fmt.Errorf("no backend at %s", address)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, to)
		},
	})
	t.Cleanup(proxy.Close)
	applied := make(chan error, 16)
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	go dataplane.Watch(watchCtx, testenv.Client, dpKey.Namespace, dpKey.Name, proxy, func(err error) { applied <- err })
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	http80, tcp9000 := listening[80], listening[9000]
	mu.Unlock()
	for path, want := range map[string]string{"/a": "web-a", "/b/x": "web-b", "/other": "web-other"} {
		resp, err := http.Get("http://" + http80 + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != want {
			t.Errorf("GET %s: %d %q, want %q", path, resp.StatusCode, body, want)
		}
	}
	if resp, err := http.Get("http://" + http80 + "/nowhere"); err != nil || resp.StatusCode != 404 {
		t.Errorf("GET /nowhere: %v %v, want 404", resp, err)
	}
	conn, err := net.Dial("tcp", tcp9000)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = conn.Write([]byte("hello"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Errorf("TCP through the Gateway: %q %v", buf, err)
	}
	conn.Close()

	// Another class's Gateway is left alone.
	var untouched gwv1.Gateway
	if err := c.Get(ctx, client.ObjectKeyFromObject(foreignGW), &untouched); err != nil {
		t.Fatal(err)
	}
	if len(untouched.Finalizers) > 0 || len(untouched.Status.Addresses) > 0 || meta.IsStatusConditionTrue(untouched.Status.Conditions, string(gwv1.GatewayConditionAccepted)) {
		t.Errorf("a Gateway of another class was touched: %+v %+v", untouched.Finalizers, untouched.Status)
	}

	// Deleting the Gateway deletes its load balancer, then the Gateway.
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "Gateway and its load balancer gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		return len(cloud.LoadBalancers()) == 0, nil
	})
	var hr gwv1.HTTPRoute
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "route-a"}, &hr); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, dpKey, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the data plane Secret outlived its Gateway: %v", err)
	}
	if len(hr.Status.Parents) != 0 {
		t.Errorf("route-a keeps parent statuses of a deleted Gateway: %+v", hr.Status.Parents)
	}
}

// TestProviderRefusalOnGateway: a load balancer the provider refuses (its
// quota) leaves that Gateway unprogrammed with the provider's reason and a
// Warning Event, the other Gateway programmed; once the provider has room,
// it is programmed.
func TestProviderRefusalOnGateway(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 1})
	gw := func(name string) *gwv1.Gateway {
		return &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
				Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	}
	programmed := func(name string) *metav1.Condition {
		var got gwv1.Gateway
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
			return nil
		}
		return meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	}
	create(t, c, gw("first"))
	testenv.Eventually(t, time.Minute, "the first Gateway programmed", func() (bool, error) {
		p := programmed("first")
		return p != nil && p.Status == metav1.ConditionTrue, nil
	})
	create(t, c, gw("second"))
	testenv.Eventually(t, time.Minute, "the second Gateway saying the provider refused", func() (bool, error) {
		p := programmed("second")
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == string(gwv1.GatewayReasonAddressNotAssigned) &&
			strings.Contains(p.Message, "the provider did not make the load balancer") && strings.Contains(p.Message, "quota"), nil
	})
	testenv.Eventually(t, time.Minute, "a Warning Event on the second Gateway", func() (bool, error) {
		evs, err := testenv.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name == "second" && e.Reason == "SyncLoadBalancerFailed" && strings.Contains(e.Message, "quota")
		}), nil
	})
	if p := programmed("first"); p == nil || p.Status != metav1.ConditionTrue {
		t.Errorf("the first Gateway lost Programmed: %+v", p)
	}
	cloud.SetSettings(simcloud.Settings{MaxLoadBalancers: 2})
	testenv.Eventually(t, 2*time.Minute, "the second Gateway programmed once the provider has room", func() (bool, error) {
		p := programmed("second")
		return p != nil && p.Status == metav1.ConditionTrue, nil
	})
}

// TestListenerProtocolTheProviderRefuses: a provider whose load balancers
// serve no UDP refuses a Gateway's load balancer with TCP and UDP
// listeners; the UDP listener is then not accepted (UnsupportedProtocol,
// with the provider's words, and a Warning Event), its route not attached,
// and the load balancer made for the others: the Gateway is programmed.
func TestListenerProtocolTheProviderRefuses(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	cloud.SetSettings(simcloud.Settings{LoadBalancerProtocols: []string{"TCP"}})
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+testenv.Name("dataplanes"))
	ns := namespace(t, c)
	create(t, c, service(ns, "web", corev1.ProtocolTCP, 8080), service(ns, "dns", corev1.ProtocolUDP, 53))
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mixed"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "dns", Port: 53, Protocol: gwv1.UDPProtocolType},
			}}}
	udp := &gwv1.UDPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dns"},
		Spec: gwv1.UDPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "mixed", SectionName: ptr.To(gwv1.SectionName("dns"))}}},
			Rules:           []gwv1.UDPRouteRule{{BackendRefs: []gwv1.BackendRef{backendRef("dns", 53)}}},
		}}
	create(t, c, gw, httpRoute(ns, "web", "mixed", "/", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 8080)}), udp)

	var got gwv1.Gateway
	testenv.Eventually(t, 2*time.Minute, "the Gateway programmed without its UDP listener", func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed)) && len(got.Status.Addresses) == 1, nil
	})
	for _, ls := range got.Status.Listeners {
		a := meta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionAccepted))
		p := meta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionProgrammed))
		switch ls.Name {
		case "http":
			if a == nil || a.Status != metav1.ConditionTrue || p == nil || p.Status != metav1.ConditionTrue {
				t.Errorf("listener http: Accepted %+v, Programmed %+v; want both True", a, p)
			}
		case "dns":
			if a == nil || a.Status != metav1.ConditionFalse || a.Reason != string(gwv1.ListenerReasonUnsupportedProtocol) || !strings.Contains(a.Message, "serve TCP only") {
				t.Errorf("listener dns: Accepted %+v; want False/UnsupportedProtocol with the provider's words", a)
			}
		}
	}
	testenv.Eventually(t, time.Minute, "the UDPRoute not attached", func() (bool, error) {
		var r gwv1.UDPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(udp), &r); err != nil {
			return false, err
		}
		a := parentCondition(r.Status.Parents, "mixed", string(gwv1.RouteConditionAccepted))
		return a != nil && a.Status == metav1.ConditionFalse, nil
	})
	// Events are recorded asynchronously: wait for the one that says why.
	testenv.Eventually(t, time.Minute, "a Warning Event saying the UDP listeners were refused", func() (bool, error) {
		return slices.ContainsFunc(testenv.Events(t, "mixed")["SyncLoadBalancerFailed"], func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "UDP")
		}), nil
	})
	lbs := slices.DeleteFunc(cloud.LoadBalancers(), func(lb simcloud.LoadBalancer) bool {
		return !strings.Contains(lb.Tags["service"], "/"+ns+"-mixed-")
	})
	if len(lbs) != 1 || len(lbs[0].Listeners) != 1 || lbs[0].Listeners[0].Protocol != "TCP" || lbs[0].Listeners[0].Port != 80 {
		t.Errorf("load balancers in the cloud: %+v; want one, with the TCP listener on 80", lbs)
	}
}
