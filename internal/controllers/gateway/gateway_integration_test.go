//go:build integration

package gateway_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
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

// namespace makes a namespace for a test's Gateways. Called after the
// test's Outrigger started, its cleanup runs while that Outrigger still
// runs: the test's Gateways are deleted and awaited gone, so what
// Outrigger made for them (data plane Services of type LoadBalancer among
// it) is gone before the next test's Outrigger, on a cloud of its own,
// could take it up.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("gw")}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DeleteAllOf(ctx, &gwv1.Gateway{}, client.InNamespace(ns.Name)); err != nil {
			t.Errorf("deleting the Gateways of %s: %v", ns.Name, err)
			return
		}
		testenv.Eventually(t, time.Minute, "the Gateways of "+ns.Name+" gone", func() (bool, error) {
			var gws gwv1.GatewayList
			if err := c.List(ctx, &gws, client.InNamespace(ns.Name)); err != nil {
				return false, err
			}
			return len(gws.Items) == 0, nil
		})
		_ = c.Delete(ctx, ns)
	})
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

// attachedListener waits for gw's one listener to count one attached route
// (route statuses and the Gateway's listener status are separate writes, so
// the routes' may come first) and checks that it lists kind.
func attachedListener(t *testing.T, c client.Client, gw *gwv1.Gateway, kind gwv1.Kind) {
	t.Helper()
	var ls []gwv1.ListenerStatus
	testenv.Eventually(t, time.Minute, "the Gateway's listener status", func() (bool, error) {
		var got gwv1.Gateway
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		ls = got.Status.Listeners
		return len(ls) == 1 && ls[0].AttachedRoutes == 1, nil
	})
	if !slices.ContainsFunc(ls[0].SupportedKinds, func(k gwv1.RouteGroupKind) bool { return k.Kind == kind }) {
		t.Errorf("listener status %+v, want %s supported", ls, kind)
	}
}

// servedByDataPlane runs a data plane in the test, programmed from the
// Secret Outrigger writes for the Gateway ns/name as a data plane pod
// watches it, with its one listener on a loopback port and its backend
// clusterIP dialed at backend; it returns the listener's address once the
// first programming applied.
func servedByDataPlane(t *testing.T, ns, name, clusterIP, backend string) string {
	t.Helper()
	var mu sync.Mutex
	var listening string
	proxy := dataplane.New(dataplane.Options{
		ListenTCP: func(int32) (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				mu.Lock()
				listening = l.Addr().String()
				mu.Unlock()
			}
			return l, err
		},
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			if address != clusterIP {
				return nil, fmt.Errorf("no backend at %s", address)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, backend)
		},
	})
	t.Cleanup(proxy.Close)
	applied := make(chan error, 16)
	watchCtx, stopWatch := context.WithCancel(ctx)
	t.Cleanup(stopWatch)
	dpKey := types.NamespacedName{Namespace: gateway.DefaultNamespace, Name: gateway.DataPlaneName(ns, name)}
	go dataplane.Watch(watchCtx, testenv.Client, dpKey.Namespace, dpKey.Name, proxy, func(err error) { applied <- err })
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return listening
}
