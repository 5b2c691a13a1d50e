//go:build integration

package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	"k8s.io/cloud-provider/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// l7Cloud is a provider whose cloud has its own layer-7 load balancers
// (provider.Gateways): it keeps what it is given by Gateway UID and
// refuses Gateways named "refused-*".
type l7Cloud struct {
	*fake.Cloud
	mu      sync.Mutex
	lbs     map[types.UID]*provider.Gateway
	ensured map[types.UID]int
	deleted []types.UID
}

func (c *l7Cloud) GatewayLoadBalancer() (provider.GatewayLoadBalancer, bool) { return c, true }

// GatewayFeatures names one feature Outrigger does not compile, which the
// class must not state.
func (c *l7Cloud) GatewayFeatures() []string {
	return []string{"Gateway", "HTTPRoute", "ReferenceGrant", "HTTPRouteQueryParamMatching", "SomethingOutriggerDoesNotCompile"}
}

func (c *l7Cloud) EnsureGatewayLoadBalancer(_ context.Context, clusterName string, gw *provider.Gateway) (*corev1.LoadBalancerStatus, error) {
	if strings.HasPrefix(gw.Name, "refused-") {
		return nil, provider.Reasonf(provider.ReasonInvalidSpec, "no layer-7 load balancers in this region")
	}
	if clusterName == "" || gw.ClusterID == "" || gw.UID == "" {
		return nil, fmt.Errorf("no ownership record to write: cluster %q, cluster ID %q, UID %q", clusterName, gw.ClusterID, gw.UID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lbs[gw.UID] = gw
	c.ensured[gw.UID]++
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.70.1"}}}, nil
}

func (c *l7Cloud) EnsureGatewayLoadBalancerDeleted(_ context.Context, _ string, gw *provider.Gateway) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.lbs, gw.UID)
	c.deleted = append(c.deleted, gw.UID)
	return nil
}

func (c *l7Cloud) state(uid types.UID) (*provider.Gateway, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lbs[uid], c.ensured[uid], slices.Contains(c.deleted, uid)
}

// TestGatewaysOnTheCloudsOwnLoadBalancers: a provider offering its own
// layer-7 load balancers, served as a plugin, gets each Gateway compiled
// with its routes (backends naming their Services) and the ownership
// record to keep; its address is the Gateway's; Outrigger makes no data
// plane and no load balancer Service; a change that does not concern the
// cloud costs no call; a refusal is the Gateway's Programmed message and a
// Warning Event; a deleted Gateway's load balancer is deleted; the class
// states only the features both sides serve.
func TestGatewaysOnTheCloudsOwnLoadBalancers(t *testing.T) {
	c := setup(t)
	cloud := &l7Cloud{Cloud: &fake.Cloud{}, lbs: map[types.UID]*provider.Gateway{}, ensured: map[types.UID]int{}}
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "p.sock")
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = plugin.Serve(pctx, ln, cloud, plugin.Info{Name: "l7", Version: "test"})
	}()
	t.Cleanup(func() { stop(); <-served })
	cfg := filepath.Join(dir, "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dpNS := testenv.Name("dataplanes")
	testenv.StartOutrigger(t, testenv.StartCloud(t), "--cloud-provider=grpc", "--cloud-config="+cfg,
		"--controllers=gateway-controller", "--gateway-namespace="+dpNS)
	ns := namespace(t, c)

	var class gwv1.GatewayClass
	testenv.Eventually(t, time.Minute, "the plugin's GatewayClass accepted", func() (bool, error) {
		var classes gwv1.GatewayClassList
		if err := c.List(ctx, &classes); err != nil {
			return false, err
		}
		for _, gc := range classes.Items {
			if strings.HasPrefix(string(gc.Spec.ControllerName), "outrigger.dev/") && strings.Contains(gc.Name, "grpc") &&
				meta.IsStatusConditionTrue(gc.Status.Conditions, string(gwv1.GatewayClassConditionStatusAccepted)) {
				class = gc
				return true, nil
			}
		}
		return false, nil
	})
	var features []string
	for _, f := range class.Status.SupportedFeatures {
		features = append(features, string(f.Name))
	}
	if want := []string{"Gateway", "HTTPRoute", "ReferenceGrant", "HTTPRouteQueryParamMatching"}; !slices.Equal(features, want) {
		t.Errorf("class %s states %v, want %v: what Outrigger compiles and the cloud serves", class.Name, features, want)
	}

	create(t, c, service(ns, "web", corev1.ProtocolTCP, 8080))
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "native"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class.Name),
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	route := httpRoute(ns, "web", "native", "/a", gwv1.HTTPBackendRef{BackendRef: backendRef("web", 8080)})
	create(t, c, gw, route)
	testenv.Eventually(t, time.Minute, "the Gateway programmed at the cloud's address", func() (bool, error) {
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(gw), &got); err != nil {
			return false, err
		}
		// The Gateway may be programmed before the route attaches: the
		// cloud is given the route with a later call.
		lb, _, _ := cloud.state(got.UID)
		routed := lb != nil && lb.Config != nil && len(lb.Config.Ports) == 1 && len(lb.Config.Ports[0].Hosts) == 1
		return routed && meta.IsStatusConditionTrue(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed)) &&
			len(got.Status.Addresses) == 1 && got.Status.Addresses[0].Value == "198.18.70.1", nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatal(err)
	}
	lb, _, _ := cloud.state(gw.UID)
	if lb == nil || lb.Namespace != ns || lb.Name != "native" || lb.Config == nil || len(lb.Config.Ports) != 1 {
		t.Fatalf("the cloud was given %+v", lb)
	}
	p := lb.Config.Ports[0]
	if p.Port != 80 || len(p.Hosts) != 1 || len(p.Hosts[0].Rules) != 1 || len(p.Hosts[0].Rules[0].Backends) != 1 {
		t.Fatalf("the cloud was given port %+v", p)
	}
	rule := p.Hosts[0].Rules[0]
	if b := rule.Backends[0]; b.Service == nil || *b.Service != (dataplane.ServicePort{Namespace: ns, Name: "web", Port: 8080}) || b.Address == "" {
		t.Errorf("backend %+v: want Service %s/web:8080 with its cluster address", b, ns)
	}
	if got := ptr.Deref(rule.Match.Path.Value, ""); got != "/a" {
		t.Errorf("rule path %q, want /a", got)
	}
	testenv.Eventually(t, time.Minute, "the route accepted", func() (bool, error) {
		var got gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKeyFromObject(route), &got); err != nil {
			return false, err
		}
		a := parentConditionOf(got.Status.Parents, string(class.Spec.ControllerName), "native", string(gwv1.RouteConditionAccepted))
		return a != nil && a.Status == metav1.ConditionTrue, nil
	})
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(dpNS)); err != nil {
		t.Fatal(err)
	}
	var nsObj corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: dpNS}, &nsObj); !apierrors.IsNotFound(err) || len(svcs.Items) != 0 {
		t.Errorf("a data plane was made (namespace %s: %v, Services %d)", dpNS, err, len(svcs.Items))
	}

	// A change the cloud is not given (an annotation) costs no call; the
	// route change after it costs exactly one.
	_, before, _ := cloud.state(gw.UID)
	patch := client.MergeFrom(gw.DeepCopy())
	gw.Annotations = map[string]string{"example.com/note": "no cloud change"}
	if err := c.Patch(ctx, gw, patch); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(route), route); err != nil {
		t.Fatal(err)
	}
	route.Spec.Rules[0].Matches[0].Path.Value = ptr.To("/b")
	if err := c.Update(ctx, route); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the cloud given the route's new path", func() (bool, error) {
		lb, _, _ := cloud.state(gw.UID)
		return ptr.Deref(lb.Config.Ports[0].Hosts[0].Rules[0].Match.Path.Value, "") == "/b", nil
	})
	if _, after, _ := cloud.state(gw.UID); after != before+1 {
		t.Errorf("%d EnsureGatewayLoadBalancer calls for an annotation and a route change, want 1", after-before)
	}

	refused := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "refused-1"},
		Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class.Name),
			Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}
	create(t, c, refused)
	testenv.Eventually(t, time.Minute, "the refusal in the Gateway's Programmed condition", func() (bool, error) {
		var got gwv1.Gateway
		if err := c.Get(ctx, client.ObjectKeyFromObject(refused), &got); err != nil {
			return false, err
		}
		p := meta.FindStatusCondition(got.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
		return p != nil && p.Status == metav1.ConditionFalse && p.Reason == string(gwv1.GatewayReasonAddressNotAssigned) &&
			strings.Contains(p.Message, "the provider did not make the load balancer") && strings.Contains(p.Message, "no layer-7 load balancers"), nil
	})
	testenv.Eventually(t, time.Minute, "a Warning Event on the refused Gateway", func() (bool, error) {
		return slices.ContainsFunc(testenv.Events(t, "refused-1")["SyncLoadBalancerFailed"], func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "no layer-7 load balancers")
		}), nil
	})

	if err := c.Delete(ctx, gw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the Gateway and its load balancer deleted", func() (bool, error) {
		lb, _, deleted := cloud.state(gw.UID)
		err := c.Get(ctx, client.ObjectKeyFromObject(gw), &gwv1.Gateway{})
		return lb == nil && deleted && apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}

// parentConditionOf is the condition of a route's parent entry written by
// controller for gw, or nil.
func parentConditionOf(parents []gwv1.RouteParentStatus, controller, gw, typ string) *metav1.Condition {
	for _, p := range parents {
		if string(p.ControllerName) == controller && string(p.ParentRef.Name) == gw {
			return meta.FindStatusCondition(p.Conditions, typ)
		}
	}
	return nil
}
