//go:build integration

package chaos

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The checks must catch what they claim to: with no Outrigger running and
// the cloud and cluster broken by hand, every invariant reports.
func TestInvariantsCatchBreakage(t *testing.T) {
	t.Run("two clusters of one name", crossClusterBreakage)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &harness{cfg: Config{Nodes: 2, Services: 1, Log: io.Discard}, dir: t.TempDir(), created: map[string]time.Time{}, closing: make(chan struct{})}
	h.report = newReport(h.cfg, Schedule{})
	if err := h.setUp(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.tearDown()
	watch, err := h.watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); watch.Wait() }()
	// Nodes as their kubelets register them; nobody initializes them.
	for _, name := range []string{"chaos-node-1", "chaos-node-2"} {
		if err := kubeletsim.Register(ctx, h.client, name); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := h.client.CoreV1().Services(namespace).Get(ctx, "svc-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A load balancer for svc-1 with the wrong listeners, a second one for
	// it, and one for no Service.
	for _, lb := range []struct{ name, owner string }{
		{cloudprovider.DefaultLoadBalancerName(svc), "chaos/svc-1"}, {"a-duplicate", "chaos/svc-1"}, {"a-leaked", "chaos/gone"},
	} {
		spec := simcloud.LoadBalancerSpec{Tags: map[string]string{"service": lb.owner}, Listeners: []simcloud.Listener{{Protocol: "TCP", Port: 1, NodePort: 30001}}}
		if _, err := h.cloud.PutLoadBalancer(lb.name, spec, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.cloud.CreateRoute(simcloud.Route{Name: "r-ghost", Destination: "198.18.99.0/24", Target: "ghost"}); err != nil {
		t.Fatal(err)
	}
	// A Service whose deletion a finalizer holds up.
	held := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: namespace, Finalizers: []string{"example.com/hold"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := h.client.CoreV1().Services(namespace).Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CoreV1().Services(namespace).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Node whose instance was never there, and a Node deleted while its
	// instance runs.
	if err := kubeletsim.Register(ctx, h.client, "no-instance"); err != nil {
		t.Fatal(err)
	}
	// Two Nodes with one pod CIDR.
	for _, name := range []string{"chaos-node-1", "no-instance"} {
		patch := []byte(`{"spec":{"podCIDR":"198.18.200.0/24","podCIDRs":["198.18.200.0/24"]}}`)
		if _, err := h.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.client.CoreV1().Nodes().Delete(ctx, "chaos-node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	want := []string{OrphanLB, NoIngress, DuplicateLB, StaleListeners, OrphanRoute, MissingRoute, NodeDeletedInstance, FinalizerLeft, NodeNotInitialized, NodeWithoutInstance, DuplicatePodCIDR}
	var got map[string]bool
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, err := h.settled(ctx)
		if err != nil {
			return false, nil
		}
		got = map[string]bool{}
		for _, x := range v {
			got[x.Invariant] = true
		}
		// The deletion is seen by the watch.
		if h.report.count(NodeDeletedInstance) > 0 {
			got[NodeDeletedInstance] = true
		}
		return len(got) == len(want), nil
	})
	for _, inv := range want {
		if !got[inv] {
			t.Errorf("%s was not reported", inv)
		}
	}
	if !slices.Equal(Invariants, want) {
		t.Errorf("this test covers %v; the harness checks %v", want, Invariants)
	}
	if err != nil {
		t.Logf("reported: %v", got)
	}
}

// crossClusterBreakage: with two clusters on one cloud (Config.SecondCluster)
// and no Outrigger running, a replica of the second cluster deleting and
// changing the first cluster's load balancer and route, and a load balancer
// of the second cluster's Service tagged with the first's ID, are reported;
// each cluster's changes to its own objects and the harness's are not.
func crossClusterBreakage(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Nodes: 1, Services: 1, Replicas: 1, SecondCluster: true, SecondReplicas: 1, Log: io.Discard}
	h := &harness{cfg: cfg, dir: t.TempDir(), created: map[string]time.Time{}, closing: make(chan struct{})}
	h.report = newReport(cfg, Schedule{})
	if err := h.setUp(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.tearDown()
	first, second := h.clusterIDs()
	svc, err := h.second.client.CoreV1().Services(namespace).Get(ctx, "svc-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lb := range []struct{ name, id string }{
		{"first-lb", first}, {"first-lb-2", first}, {"own-lb", second}, {cloudprovider.DefaultLoadBalancerName(svc), first},
	} {
		tags := map[string]string{sim.TagCluster: "kubernetes", sim.TagClusterID: lb.id, sim.TagService: namespace + "/svc-1"}
		if _, err := h.cloud.PutLoadBalancer(lb.name, simcloud.LoadBalancerSpec{Tags: tags}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []struct{ name, id string }{{"first-route", first}, {"own-route", second}} {
		route := simcloud.Route{Name: r.name, Destination: "198.18.99.0/24", Target: "ghost", Tags: map[string]string{sim.TagCluster: "kubernetes", sim.TagClusterID: r.id}}
		if _, err := h.cloud.CreateRoute(route); err != nil {
			t.Fatal(err)
		}
	}
	call := func(caller, method, path, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, h.cloudURL+path, bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		if caller != "" {
			req.Header.Set(simcloud.CallerHeader, caller)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s by %q: %s", method, path, caller, resp.Status)
		}
	}
	mainCaller, secondCaller := callerPrefix+"0-1", secondCallerPrefix+"0-2"
	// Each cluster's own, and the harness's: no violation.
	call(secondCaller, http.MethodPut, "/v1/loadbalancers/own-lb/backends", `[]`)
	call(secondCaller, http.MethodDelete, "/v1/routes/own-route", "")
	call(secondCaller, http.MethodPost, "/v1/routes", `{"name":"own-new","destination":"198.18.64.0/24","target":"ghost","tags":{"cluster-id":"`+second+`"}}`)
	call(mainCaller, http.MethodPut, "/v1/loadbalancers/first-lb-2/backends", `[]`)
	call("", http.MethodDelete, "/v1/loadbalancers/own-lb", "")
	if len(h.report.Violations) != 0 {
		t.Fatalf("own changes and the harness's: %v", h.report.Violations)
	}
	// The second cluster's replica on the first's objects.
	call(secondCaller, http.MethodDelete, "/v1/loadbalancers/first-lb", "")
	call(secondCaller, http.MethodDelete, "/v1/routes/first-route", "")
	call(secondCaller, http.MethodPut, "/v1/loadbalancers/first-lb-2/backends", `[]`)
	call(mainCaller, http.MethodPost, "/v1/routes", `{"name":"stolen","destination":"198.18.65.0/24","target":"ghost","tags":{"cluster-id":"`+second+`"}}`)
	got := map[string]string{}
	for _, v := range h.report.Violations {
		got[v.Object] = v.Invariant
	}
	want := map[string]string{"loadbalancer/first-lb": CrossClusterDelete, "route/first-route": CrossClusterDelete,
		"loadbalancer/first-lb-2": CrossClusterWrite, "route/stolen": CrossClusterWrite}
	if !maps.Equal(got, want) {
		t.Errorf("violations %v, want %v", got, want)
	}
	v, err := h.settled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(v, func(v Violation) bool {
		return v.Invariant == WrongClusterLB && v.Object == secondObject+namespace+"/svc-1"
	}) {
		t.Errorf("the second cluster's svc-1 has a load balancer tagged with the first cluster's ID; reported %v", v)
	}
	if extra := cfg.invariants()[len(Invariants):]; !slices.Equal(extra, []string{CrossClusterWrite, CrossClusterDelete, WrongClusterLB}) {
		t.Errorf("this case covers %s, %s and %s; the harness checks %v", CrossClusterWrite, CrossClusterDelete, WrongClusterLB, extra)
	}
}
