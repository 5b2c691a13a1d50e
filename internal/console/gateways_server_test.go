package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

// serveGatewayAPI makes client's discovery list the Gateway API's kinds
// named, as an API server with those CRDs does.
func serveGatewayAPI(client *fake.Clientset, resources ...string) {
	list := &metav1.APIResourceList{GroupVersion: gwv1.GroupVersion.String()}
	for _, r := range resources {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Namespaced: r != "gatewayclasses"})
	}
	client.Resources = append(client.Resources, list)
}

var allGatewayKinds = []string{"gatewayclasses", "gateways", "httproutes", "grpcroutes", "tcproutes", "udproutes", "tlsroutes"}

func TestGatewaysWithoutTheGatewayAPI(t *testing.T) {
	cases := []struct {
		name      string
		served    []string
		gateway   bool
		wantNote  string
		wantWarns int
	}{
		{name: "CRDs not installed", gateway: true, wantNote: "is not served on this cluster"},
		{name: "served without Gateways", served: []string{"httproutes"}, gateway: true, wantNote: "without Gateways or GatewayClasses"},
		{name: "no Gateway API client", served: allGatewayKinds, wantNote: "does not read the Gateway API"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(lbService("web", withVIP("127.0.100.1")))
			if tc.served != nil {
				serveGatewayAPI(client, tc.served...)
			}
			opts := Options{Client: client}
			if tc.gateway {
				opts.Gateway = newGatewayClient(t)
			}
			snap := New(opts).Snapshot(View{})
			if !strings.Contains(snap.NoGatewayAPI, tc.wantNote) || len(snap.Warnings) != tc.wantWarns {
				t.Errorf("note %q, warnings %v; want a note with %q", snap.NoGatewayAPI, snap.Warnings, tc.wantNote)
			}
			if len(snap.Gateways) != 0 || len(snap.LoadBalancers) != 1 {
				t.Errorf("gateways %v, load balancers %v: want none and web", snap.Gateways, snap.LoadBalancers)
			}
		})
	}
}

// TestGatewaysOverTheStream: Gateways and their routes are read through
// informers; a Gateway's status change reaches an open page; the filter
// is the server's.
func TestGatewaysOverTheStream(t *testing.T) {
	client := fake.NewClientset(lbService("web", withVIP("127.0.100.1")))
	serveGatewayAPI(client, allGatewayKinds...)
	gw := newGatewayClient(t,
		gatewayClass("outrigger-sim", "outrigger.dev/sim"),
		testGateway("shop", "outrigger-sim", withGatewayConditions(accepted, gwCondition("Programmed", "False", "AddressNotAssigned", "the load balancer is pending"))),
		testGateway("other", "outrigger-sim", withGatewayConditions(accepted, programmed)),
		httpRoute("default", "front", []string{"shop.example.com"}, []gwv1.ParentReference{{Name: "shop"}}),
		grpcRoute("default", "rpc", []string{"rpc.example.com"}, []gwv1.ParentReference{{Name: "shop"}}),
	)
	s := New(Options{Client: client, Gateway: gw, Owners: []Owner{{Provider: "sim"}}, Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Start(ctx) }()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	srv := hs.URL

	resp, err := http.Get(srv + "/api/stream?gateways=shop")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	next := func() Snapshot {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended: %v", err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"gatewayCount"`) {
				var snap Snapshot
				if err := json.Unmarshal([]byte(data), &snap); err != nil {
					t.Fatal(err)
				}
				return snap
			}
		}
	}
	snap := next()
	if snap.NoGatewayAPI != "" || len(snap.Warnings) != 0 {
		t.Fatalf("note %q, warnings %v", snap.NoGatewayAPI, snap.Warnings)
	}
	if len(snap.Gateways) != 1 || snap.GatewayCount != (Count{Total: 2, Ready: 1, Matching: 1}) {
		t.Fatalf("gateways=shop: %+v, %+v", snap.Gateways, snap.GatewayCount)
	}
	g := snap.Gateways[0]
	if g.Name != "shop" || g.State != "NotProgrammed" || g.Reason != "AddressNotAssigned" || g.Provider != "sim" ||
		len(g.Routes) != 2 || g.Routes[0].Kind != "GRPCRoute" || g.Routes[0].Name != "rpc" || g.Routes[0].Hostnames[0] != "rpc.example.com" ||
		g.Routes[1].Kind != "HTTPRoute" || g.Routes[1].Name != "front" || g.Routes[1].Hostnames[0] != "shop.example.com" {
		t.Fatalf("shop: %+v", g)
	}

	// The controller programs it: the open page hears.
	cur, err := gw.GatewayV1().Gateways("default").Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Status.Conditions = []metav1.Condition{accepted, programmed}
	cur.Status.Addresses = []gwv1.GatewayStatusAddress{{Value: "198.18.0.9"}}
	if _, err := gw.GatewayV1().Gateways("default").UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		snap = next()
		if len(snap.Gateways) == 1 && snap.Gateways[0].State == "Programmed" {
			break
		}
	}
	if got := snap.Gateways[0].Addresses; len(got) != 1 || got[0] != "198.18.0.9" {
		t.Errorf("addresses %v", got)
	}

	if r, body := get(t, srv+"/api/snapshot?gateways="+strings.Repeat("x", maxFilter+1)); r.StatusCode != http.StatusBadRequest {
		t.Errorf("a long Gateway filter: %d %q, want 400", r.StatusCode, body)
	}
}

// A console whose identity may not list Gateways says so and shows the
// rest; one that may not list a route kind shows the Gateways without it.
func TestForbiddenGatewayKindsAreNamed(t *testing.T) {
	forbid := func(resource string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: gwv1.GroupName, Resource: resource}, "", nil)
		}
	}
	cases := []struct {
		resource     string
		wantWarning  string
		wantGateways int
	}{
		{resource: "gateways", wantWarning: "Gateways are not shown: this console's identity may not list them"},
		{resource: "udproutes", wantWarning: "UDPRoutes are not shown", wantGateways: 1},
		{resource: "tlsroutes", wantWarning: "TLSRoutes are not shown", wantGateways: 1},
	}
	for _, tc := range cases {
		t.Run(tc.resource, func(t *testing.T) {
			client := fake.NewClientset()
			serveGatewayAPI(client, allGatewayKinds...)
			gw := newGatewayClient(t, gatewayClass("c", "outrigger.dev/sim"), testGateway("shop", "c"))
			gw.PrependReactor("list", tc.resource, forbid(tc.resource))
			snap := New(Options{Client: client, Gateway: gw}).Snapshot(View{})
			if len(snap.Warnings) != 1 || !strings.Contains(snap.Warnings[0], tc.wantWarning) {
				t.Errorf("warnings %v, want one with %q", snap.Warnings, tc.wantWarning)
			}
			if len(snap.Gateways) != tc.wantGateways || snap.NoGatewayAPI != "" {
				t.Errorf("gateways %+v, note %q", snap.Gateways, snap.NoGatewayAPI)
			}
		})
	}
}

// TestGRPCRoutesWhereServed: GRPCRoutes are read only where discovery
// lists them and the console may list them; elsewhere the Gateway and its
// other routes show the same, with a warning only where listing failed.
func TestGRPCRoutesWhereServed(t *testing.T) {
	cases := []struct {
		name        string
		served      []string
		forbidden   bool
		wantRoutes  []string
		wantWarning string
		wantListed  bool
	}{
		{name: "served", served: allGatewayKinds, wantRoutes: []string{"GRPCRoute/rpc", "HTTPRoute/front"}, wantListed: true},
		{name: "not served", served: []string{"gatewayclasses", "gateways", "httproutes"}, wantRoutes: []string{"HTTPRoute/front"}},
		{name: "forbidden", served: allGatewayKinds, forbidden: true, wantRoutes: []string{"HTTPRoute/front"},
			wantWarning: "GRPCRoutes are not shown: this console's identity may not list them", wantListed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			serveGatewayAPI(client, tc.served...)
			gw := newGatewayClient(t, gatewayClass("c", "outrigger.dev/sim"), testGateway("shop", "c"),
				httpRoute("default", "front", nil, []gwv1.ParentReference{{Name: "shop"}}),
				grpcRoute("default", "rpc", []string{"rpc.example.com"}, []gwv1.ParentReference{{Name: "shop"}}))
			if tc.forbidden {
				gw.PrependReactor("list", "grpcroutes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: gwv1.GroupName, Resource: "grpcroutes"}, "", nil)
				})
			}
			snap := New(Options{Client: client, Gateway: gw}).Snapshot(View{})
			var warnings []string
			if tc.wantWarning != "" {
				warnings = []string{tc.wantWarning}
			}
			if len(snap.Warnings) != len(warnings) || (len(warnings) == 1 && !strings.Contains(snap.Warnings[0], tc.wantWarning)) {
				t.Errorf("warnings %q, want %q", snap.Warnings, warnings)
			}
			if len(snap.Gateways) != 1 {
				t.Fatalf("gateways %+v", snap.Gateways)
			}
			var got []string
			for _, r := range snap.Gateways[0].Routes {
				got = append(got, r.Kind+"/"+r.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantRoutes) || snap.Gateways[0].RoutesTotal != len(tc.wantRoutes) {
				t.Errorf("routes %v (%d), want %v", got, snap.Gateways[0].RoutesTotal, tc.wantRoutes)
			}
			listed := slices.ContainsFunc(gw.Actions(), func(a k8stesting.Action) bool {
				return a.GetVerb() == "list" && a.GetResource().Resource == "grpcroutes"
			})
			if listed != tc.wantListed {
				t.Errorf("GRPCRoutes listed: %v, want %v", listed, tc.wantListed)
			}
		})
	}
}

// newGatewayClient is a fake Gateway API client holding objects, created
// through its v1 API: given to the constructor they would be filed under
// the first version the scheme names for their type (v1beta1 aliases
// v1's), and v1 would list none.
func newGatewayClient(t *testing.T, objects ...runtime.Object) *gwfake.Clientset {
	t.Helper()
	c := gwfake.NewSimpleClientset()
	ctx := context.Background()
	for _, o := range objects {
		var err error
		switch o := o.(type) {
		case *gwv1.GatewayClass:
			_, err = c.GatewayV1().GatewayClasses().Create(ctx, o, metav1.CreateOptions{})
		case *gwv1.Gateway:
			_, err = c.GatewayV1().Gateways(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *gwv1.HTTPRoute:
			_, err = c.GatewayV1().HTTPRoutes(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *gwv1.GRPCRoute:
			_, err = c.GatewayV1().GRPCRoutes(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("no fake for %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// An Outrigger Gateway's snapshot carries its data plane's traffic, read
// in the background from the pods in its load balancer Service's
// namespace; the read's end is a change the pages hear.
func TestGatewayTrafficInTheSnapshot(t *testing.T) {
	dp := startDataPlane(t)
	dp.get(80, "/web", 3)
	shop := testGateway("shop", "outrigger-sim", withGatewayConditions(accepted, programmed))
	svc := lbService("default-shop", func(s *corev1.Service) {
		s.Namespace = dpNamespace
		s.Labels = map[string]string{gateway.GatewayUIDLabel: string(shop.UID)}
	})
	client := fake.NewClientset(svc, dataPlanePod(string(shop.UID), "shop-dp", true))
	serveGatewayAPI(client, allGatewayKinds...)
	proxyPods(client, func(string) proxied { return proxied{data: dp.exposition()} })
	gw := newGatewayClient(t, gatewayClass("outrigger-sim", "outrigger.dev/sim"), gatewayClass("other", "example.com/other"),
		shop, testGateway("theirs", "other"))
	s := New(Options{Client: client, Gateway: gw, Owners: []Owner{{Provider: "sim"}}})
	t.Cleanup(s.endLife)

	v := s.version.Load()
	snap := s.Snapshot(View{})
	if len(snap.Gateways) != 2 || snap.Gateways[0].Name != "shop" || snap.Gateways[0].Traffic == nil || snap.Gateways[1].Traffic != nil {
		t.Fatalf("gateways %+v", snap.Gateways)
	}
	s.traffic.reads.Wait()
	if s.version.Load() == v {
		t.Error("a read ended without a change")
	}
	tr := s.Snapshot(View{}).Gateways[0].Traffic
	if tr.Namespace != dpNamespace || tr.PodsRead != 1 || rowNamed(tr.Routes, "ns/web").Requests != 3 {
		t.Errorf("traffic %+v", tr)
	}
}
