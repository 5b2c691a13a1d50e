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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testcert"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	ctx        = context.Background()
	installed  sync.Once
	installErr error
	cl         client.Client
)

// setup installs the Gateway API CRDs once and returns a client that knows
// their types.
func setup(t *testing.T) client.Client {
	t.Helper()
	installed.Do(func() {
		if installErr = gatewayapi.Install(ctx, testenv.Config); installErr != nil {
			return
		}
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		_ = gwv1.Install(scheme)
		cl, installErr = client.New(testenv.Config, client.Options{Scheme: scheme})
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return cl
}

func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("gw")}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func service(ns, name string, proto corev1.Protocol, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Protocol: proto, Port: port}}},
	}
}

func backendRef(name string, port int32) gwv1.BackendRef {
	return gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr.To(port)}}
}

func httpRoute(ns, name, gw, path string, backends ...gwv1.HTTPBackendRef) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(gw)}}},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(path)}}},
				BackendRefs: backends,
			}},
		},
	}
}

// parentCondition is the condition of a route's parent entry Outrigger
// wrote for gw, or nil.
func parentCondition(parents []gwv1.RouteParentStatus, gw, typ string) *metav1.Condition {
	for _, p := range parents {
		if p.ControllerName == gateway.ControllerNameFor("sim", "") && string(p.ParentRef.Name) == gw {
			return meta.FindStatusCondition(p.Conditions, typ)
		}
	}
	return nil
}

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

// TestDataPlaneDeployment: with an image configured, each Gateway's data
// plane is a Deployment in the data plane namespace (made by Outrigger)
// whose pods pass Pod Security "restricted" as the API server's own
// admission enforces it; the Gateway is not Programmed before the pods are
// available; an HTTPS listener's certificate reaches the programming.
func TestDataPlaneDeployment(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller",
		"--gateway-namespace="+dpNS, "--gateway-data-plane-image=registry.example/outrigger:test")
	ns := namespace(t, c)
	certPEM, keyPEM := testcert.SelfSigned(t, "secure.example.com")
	create(t, c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cert"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	})
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: ptr.To(gwv1.Hostname("secure.example.com")),
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}},
			},
		},
	}
	create(t, c, gw)
	key := types.NamespacedName{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw")}
	var dep appsv1.Deployment
	testenv.Eventually(t, time.Minute, "data plane Deployment made, Gateway waiting for it", func() (bool, error) {
		if err := c.Get(ctx, key, &dep); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		p := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == string(gwv1.GatewayReasonPending) && len(got.Status.Addresses) == 1, nil
	})
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); args != "gateway-dataplane --namespace="+dpNS+" --secret="+key.Name {
		t.Errorf("data plane args %q", args)
	}

	// The API server's Pod Security admission, enforcing "restricted",
	// admits the pods (a dry run creates nothing).
	enforced := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("restricted"),
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	create(t, c, enforced)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: enforced.Name, Name: "dataplane"}, Spec: dep.Spec.Template.Spec}
	if err := c.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Errorf("Pod Security restricted refuses the data plane pod: %v", err)
	}

	var secret corev1.Secret
	if err := c.Get(ctx, key, &secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := dataplane.Unmarshal(secret.Data[gateway.ConfigKey])
	if err != nil {
		t.Fatal(err)
	}
	var https *dataplane.Port
	for i := range cfg.Ports {
		if cfg.Ports[i].Protocol == dataplane.HTTPS {
			https = &cfg.Ports[i]
		}
	}
	if https == nil || len(https.Certificates) != 1 || https.Certificates[0].Hostname != "secure.example.com" || string(https.Certificates[0].CertPEM) != string(certPEM) {
		t.Fatalf("HTTPS programming %+v, want the Secret's certificate for secure.example.com", https)
	}

	// The pods run as the Gateway's own ServiceAccount, which reads its
	// programming through the data plane's own watch and no other Secret
	// of the namespace (another Gateway's keys).
	// Two pods spread over nodes, replaced without lowering the count, a
	// budget keeping one through drains.
	if r := dep.Spec.Replicas; r == nil || *r != 2 || len(dep.Spec.Template.Spec.TopologySpreadConstraints) != 1 ||
		dep.Spec.Strategy.RollingUpdate == nil || dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("data plane Deployment replicas %v, spread %v, strategy %+v", r, dep.Spec.Template.Spec.TopologySpreadConstraints, dep.Spec.Strategy)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := c.Get(ctx, key, &pdb); err != nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("data plane disruption budget %+v: %v", pdb.Spec, err)
	}
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != key.Name {
		t.Fatalf("data plane pods run as %q, want the Gateway's own %q", sa, key.Name)
	}
	create(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dpNS, Name: "another-gateways-keys"}})
	asPods := rest.CopyConfig(testenv.Config)
	asPods.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + dpNS + ":" + key.Name}
	pods, err := kubernetes.NewForConfig(asPods)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.CoreV1().Secrets(dpNS).Get(ctx, "another-gateways-keys", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the data plane's identity reads another Secret: %v", err)
	}
	if _, err := pods.CoreV1().Secrets(dpNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the data plane's identity lists the namespace's Secrets: %v", err)
	}
	var l net.ListenConfig
	proxy := dataplane.New(dataplane.Options{ListenTCP: func(int32) (net.Listener, error) { return l.Listen(ctx, "tcp", "127.0.0.1:0") }})
	defer proxy.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	applied := make(chan error, 1)
	go dataplane.Watch(watchCtx, pods, dpNS, key.Name, proxy, func(err error) {
		select {
		case applied <- err:
		default:
		}
	})
	select {
	case err := <-applied:
		if err != nil {
			t.Errorf("the data plane could not apply its programming as its own identity: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("the data plane never read its programming as its own identity")
	}
	stopWatch()

	// Deleted, the Gateway takes its Deployment and identity along.
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "data plane Deployment and identity deleted", func() (bool, error) {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}} {
			if err := c.Get(ctx, key, o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
}

// TestForeignObjectsUntouched: an object already at the data plane's name
// that Outrigger did not make for this Gateway is never changed or
// deleted; the Gateway says why it is not programmed.
func TestForeignObjectsUntouched(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dpNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	squatter := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: dpNS, Name: gateway.DataPlaneName(ns, "gw"),
		Labels: map[string]string{"app.kubernetes.io/managed-by": "outrigger", gateway.GatewayUIDLabel: "someone-else"}},
		Data: map[string][]byte{"config.json": []byte("theirs")}}
	create(t, c, squatter)
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(gateway.ClassNameFor("sim", "")),
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}},
	}
	create(t, c, gw)
	testenv.Eventually(t, time.Minute, "the Gateway's Warning Event naming the Secret", func() (bool, error) {
		evs, err := testenv.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "gw" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "not Outrigger's") {
				return true, nil
			}
		}
		return false, nil
	})
	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "Gateway gone", func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(squatter), &got); err != nil || string(got.Data["config.json"]) != "theirs" {
		t.Errorf("another's Secret changed or deleted: %v %q", err, got.Data["config.json"])
	}
	if len(cloud.LoadBalancers()) != 0 {
		t.Errorf("load balancers left: %+v", cloud.LoadBalancers())
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

// TestNotAcceptedGateways: a Gateway Outrigger cannot honour (an address
// type the provider takes no request for, a parametersRef) is refused with
// the specification's reason and gets no load balancer; its class says
// when the class itself names parameters.
func TestNotAcceptedGateways(t *testing.T) {
	c := setup(t)
	cloud := testenv.StartCloud(t)
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, cloud, "--controllers=service-lb-controller,gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)
	withParams := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("with-params")},
		Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerNameFor("sim", ""),
			ParametersRef: &gwv1.ParametersReference{Group: "", Kind: "ConfigMap", Name: "params", Namespace: ptr.To(gwv1.Namespace(ns))}}}
	create(t, c, withParams)
	listeners := []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}
	class := gwv1.ObjectName(gateway.ClassNameFor("sim", ""))
	for _, gw := range []*gwv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostname-address"}, Spec: gwv1.GatewaySpec{GatewayClassName: class, Listeners: listeners,
			Addresses: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType), Value: "lb.example.com"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "parameters"}, Spec: gwv1.GatewaySpec{GatewayClassName: class, Listeners: listeners,
			Infrastructure: &gwv1.GatewayInfrastructure{ParametersRef: &gwv1.LocalParametersReference{Kind: "ConfigMap", Name: "params"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "class-parameters"}, Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(withParams.Name), Listeners: listeners}},
	} {
		create(t, c, gw)
	}
	want := map[string]string{
		"hostname-address": string(gwv1.GatewayReasonUnsupportedAddress),
		"parameters":       string(gwv1.GatewayReasonInvalidParameters),
		"class-parameters": string(gwv1.GatewayReasonInvalidParameters),
	}
	for name, reason := range want {
		testenv.Eventually(t, time.Minute, name+" not accepted: "+reason, func() (bool, error) {
			var got gwv1.Gateway
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &got); err != nil {
				return false, err
			}
			a := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionAccepted))
			p := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
			return a != nil && a.Status == metav1.ConditionFalse && a.Reason == reason && p != nil && p.Status == metav1.ConditionFalse, nil
		})
	}
	testenv.Eventually(t, time.Minute, "the class with parameters not accepted", func() (bool, error) {
		var gc gwv1.GatewayClass
		if err := c.Get(ctx, client.ObjectKeyFromObject(withParams), &gc); err != nil {
			return false, err
		}
		a := meta.FindStatusCondition(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted))
		return a != nil && a.Status == metav1.ConditionFalse && a.Reason == string(gwv1.GatewayClassReasonInvalidParameters), nil
	})
	// (Gateways other tests of this package left are served too: only
	// this test's namespace counts.)
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(dpNS), client.MatchingLabels{gateway.GatewayNamespaceLabel: ns}); err != nil {
		t.Fatal(err)
	}
	lbs := slices.DeleteFunc(cloud.LoadBalancers(), func(lb simcloud.LoadBalancer) bool {
		return !strings.HasPrefix(lb.Tags["service"], dpNS+"/"+ns+"-")
	})
	if len(svcs.Items) != 0 || len(lbs) != 0 {
		t.Errorf("Gateways not accepted got Services %d, load balancers %+v", len(svcs.Items), lbs)
	}
}

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
	var got gwv1.Gateway
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
		t.Fatal(err)
	}
	if ls := got.Status.Listeners; len(ls) != 1 || ls[0].AttachedRoutes != 1 ||
		!slices.ContainsFunc(ls[0].SupportedKinds, func(k gwv1.RouteGroupKind) bool { return k.Kind == "GRPCRoute" }) {
		t.Errorf("listener status %+v, want GRPCRoute supported and one route attached", ls)
	}

	// The data plane serves the call.
	var mu sync.Mutex
	var http80 string
	proxy := dataplane.New(dataplane.Options{
		ListenTCP: func(int32) (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				mu.Lock()
				http80 = l.Addr().String()
				mu.Unlock()
			}
			return l, err
		},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if address != clusterIP {
				return nil, fmt.Errorf("no backend at %s", address)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, ln.Addr().String())
		},
	})
	t.Cleanup(proxy.Close)
	applied := make(chan error, 16)
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	dpKey := types.NamespacedName{Namespace: gateway.DefaultNamespace, Name: gateway.DataPlaneName(ns, "gw")}
	go dataplane.Watch(watchCtx, testenv.Client, dpKey.Namespace, dpKey.Name, proxy, func(err error) { applied <- err })
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	addr := http80
	mu.Unlock()
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
