//go:build integration

// Package shared runs Outrigger where it is not alone: beside the upstream
// CCM in one cluster, and beside another cluster's Outrigger on one cloud.
// Each test ends with the same invariants: no foreign load balancer or
// route changed, deleted or even written to, and every own object
// converged.
package shared

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/upstreamccm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

const class = "example.com/outrigger"

// cluster is one API server's view: its client, and a namespace for the
// test's Services.
type cluster struct {
	client kubernetes.Interface
	ns     string
}

func (c cluster) create(t *testing.T, name string, cls *string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:              corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: cls,
			Ports:             []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := c.client.CoreV1().Services(c.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c cluster) get(t *testing.T, name string) (*corev1.Service, bool) {
	t.Helper()
	s, err := c.client.CoreV1().Services(c.ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

func (c cluster) update(t *testing.T, name string, mutate func(*corev1.Service)) {
	t.Helper()
	for range 10 {
		s, _ := c.get(t, name)
		mutate(s)
		_, err := c.client.CoreV1().Services(c.ns).Update(ctx, s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("too many conflicts updating the Service")
}

// switchClass moves a Service to another class the only way the API server
// allows: away from LoadBalancer (which clears the class) and back.
func (c cluster) switchClass(t *testing.T, name string, to *string) {
	t.Helper()
	c.update(t, name, func(s *corev1.Service) {
		s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
		s.Spec.AllocateLoadBalancerNodePorts, s.Spec.ExternalTrafficPolicy = nil, ""
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].NodePort = 0
		}
	})
	c.update(t, name, func(s *corev1.Service) {
		s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeLoadBalancer, to
	})
}

// provisioned reports whether the Service advertises the VIP of a load
// balancer that the cloud holds for it, tagged with its class.
func (c cluster) provisioned(t *testing.T, cloud *testenv.Cloud, name string) bool {
	svc, ok := c.get(t, name)
	if !ok {
		return false
	}
	lb, ok := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svc))
	ing := svc.Status.LoadBalancer.Ingress
	return ok && len(ing) == 1 && ing[0].IP == lb.VIP && lb.Tags["load-balancer-class"] == ptr.Deref(svc.Spec.LoadBalancerClass, "")
}

// describe says what the Service and the cloud hold for it, for a failure.
func (c cluster) describe(t *testing.T, cloud *testenv.Cloud, name string) string {
	svc, ok := c.get(t, name)
	if !ok {
		return "no Service"
	}
	lb, ok := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svc))
	return fmt.Sprintf("class %q, finalizers %v, ingress %v; load balancer %v (VIP %s, tags %v)",
		ptr.Deref(svc.Spec.LoadBalancerClass, ""), svc.Finalizers, svc.Status.LoadBalancer.Ingress, ok, lb.VIP, lb.Tags)
}

// lbState is what another CCM's load balancer must keep: its VIP, tags,
// listeners and backends.
func lbState(cloud *testenv.Cloud) map[string]string {
	out := map[string]string{}
	for _, lb := range cloud.LoadBalancers() {
		out[lb.Name] = fmt.Sprint(lb.VIP, lb.Tags, lb.Listeners, lb.Backends)
	}
	return out
}

// writesBy counts the mutating calls caller made on each object.
func writesBy(cloud *testenv.Cloud, caller string) map[string]int {
	out := map[string]int{}
	for _, c := range cloud.CallLog() {
		if c.Mutating && c.Caller == caller {
			out[c.Object]++
		}
	}
	return out
}

// callsBy counts caller's calls of op.
func callsBy(cloud *testenv.Cloud, caller, op string) int {
	n := 0
	for _, c := range cloud.CallLog() {
		if c.Caller == caller && c.Op == op {
			n++
		}
	}
	return n
}

func backendNode(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{ProviderID: "sim://" + name},
	}
	n, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.200.1"}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Outrigger owns one class beside the upstream CCM, which owns the Services
// without a class, on one cloud account. Outrigger is restarted, and while
// it is down Services are created, deleted and moved between the classes.
// Afterwards Outrigger has changed nothing of the upstream CCM's and has
// converged on its own.
func TestBesideTheUpstreamCCM(t *testing.T) {
	cloud := testenv.StartCloud(t)
	backendNode(t, testenv.Client, testenv.Name("shared-node"))
	c := cluster{client: testenv.Client, ns: testenv.Name("shared")}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--controllers=service-lb-controller"}
	upstreamccm.Start(t, upstreamccm.Build(t), cloud, flags...)
	outrigger := testenv.StartOutrigger(t, cloud, append(flags, "--load-balancer-class="+class)...)

	theirs := []string{"up-1", "up-2", "up-3", "up-to-ours"}
	ours := []string{"ours-1", "ours-2", "ours-gone", "ours-to-theirs"}
	for _, name := range theirs {
		c.create(t, name, nil)
	}
	for _, name := range ours {
		c.create(t, name, ptr.To(class))
	}
	all := append(slices.Clone(theirs), ours...)
	testenv.Eventually(t, 90*time.Second, "every Service provisioned by its own CCM", func() (bool, error) {
		for _, name := range all {
			if !c.provisioned(t, cloud, name) {
				return false, nil
			}
		}
		return true, nil
	})

	outrigger.Stop()
	// While Outrigger is down: a new upstream Service, one of Outrigger's
	// deleted, one moved to each side.
	c.create(t, "up-new", nil)
	if err := c.client.CoreV1().Services(c.ns).Delete(ctx, "ours-gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.switchClass(t, "ours-to-theirs", nil)
	c.switchClass(t, "up-to-ours", ptr.To(class))
	// The upstream CCM provisions its new Service and cleans up the deleted
	// one. ours-to-theirs depends on timing: if the upstream CCM saw it as
	// ClusterIP, it deleted Outrigger's load balancer (same cluster and
	// Service, no longer wanted) and made its own; if it saw it only back as
	// LoadBalancer, it cannot take over the load balancer tagged with
	// Outrigger's class, and retries until Outrigger, restarted, deletes it.
	theirs = []string{"up-1", "up-2", "up-3", "up-new"}
	ours = []string{"ours-1", "ours-2", "up-to-ours"}
	// up-to-ours's class moved away from the upstream CCM: it deletes its
	// load balancer and drops the finalizer, which is done before Outrigger
	// starts again (two CCMs acting at once on one Service's class change
	// race; see docs/hybrid.md#limits).
	testenv.Eventually(t, 60*time.Second, "the upstream CCM converged while Outrigger was down", func() (bool, error) {
		_, gone := c.get(t, "ours-gone")
		for _, name := range theirs {
			if !c.provisioned(t, cloud, name) {
				return false, nil
			}
		}
		moved, _ := c.get(t, "up-to-ours")
		_, lbLeft := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(moved))
		return !gone && !lbLeft && len(moved.Finalizers) == 0, nil
	})
	before := lbState(cloud)
	moved, _ := c.get(t, "ours-to-theirs")
	if lb, ok := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(moved)); ok {
		t.Logf("ours-to-theirs while Outrigger is down: a load balancer tagged with class %q", lb.Tags["load-balancer-class"])
	}

	// Outrigger reads the ownership of the other class's Services that
	// carry the finalizer. ours-to-theirs may have lost it: the upstream
	// CCM, deleting Outrigger's load balancer and then making its own,
	// checks for the finalizer on its cached copy, which can still show
	// the one it has just removed.
	toRead := 0
	for _, name := range append(slices.Clone(theirs), "ours-to-theirs") {
		if svc, ok := c.get(t, name); ok && slices.Contains(svc.Finalizers, "service.kubernetes.io/load-balancer-cleanup") {
			toRead++
		}
	}

	restarted := testenv.StartOutrigger(t, cloud, append(flags, "--load-balancer-class="+class)...)
	// Outrigger has looked at every Service of the other class carrying the
	// finalizer (one ownership read each), converged on its own, and
	// deleted the load balancer it made for ours-to-theirs, which the
	// upstream CCM then provisions afresh.
	testenv.Eventually(t, 180*time.Second, "Outrigger converged and checked every other Service; ours-to-theirs handed over", func() (bool, error) {
		reads := callsBy(cloud, restarted.Caller, "GetLoadBalancer")
		for _, name := range append(slices.Clone(ours), "ours-to-theirs") {
			if !c.provisioned(t, cloud, name) {
				return false, fmt.Errorf("%s not provisioned: %s", name, c.describe(t, cloud, name))
			}
		}
		if reads < toRead {
			return false, fmt.Errorf("%d ownership reads by the restarted Outrigger, want %d", reads, toRead)
		}
		return true, nil
	})

	after := lbState(cloud)
	writes := writesBy(cloud, restarted.Caller)
	changed, written := 0, 0
	for _, name := range theirs {
		svc, _ := c.get(t, name)
		lb := cloudprovider.DefaultLoadBalancerName(svc)
		if before[lb] != after[lb] {
			changed++
			t.Errorf("the upstream CCM's load balancer of %s changed:\n  before %s\n  after  %s", name, before[lb], after[lb])
		}
		if n := writes["loadbalancer/"+lb]; n > 0 {
			written++
			t.Errorf("Outrigger wrote %d times to the upstream CCM's load balancer of %s", n, name)
		}
		if !c.provisioned(t, cloud, name) {
			t.Errorf("%s no longer advertises its load balancer", name)
		}
	}
	t.Logf("invariants: %d foreign load balancers, %d changed or deleted, %d written to; %d own converged", len(theirs), changed, written, len(ours))
}

// Two clusters whose names share a prefix ("kubernetes" and
// "kubernetes-dev"), each with its own API server and Outrigger, route and
// load balance on one cloud. Neither lists, changes or deletes the other's
// routes or load balancers, also when its own nodes go.
func TestTwoClustersOneCloud(t *testing.T) {
	cloud := testenv.StartCloud(t)
	other := testenv.StartSecondControlPlane(t)
	flags := func(name string) []string {
		return []string{"--cluster-name=" + name, "--controllers=service-lb-controller,node-route-controller,node-ipam-controller",
			"--allocate-node-cidrs=true", "--configure-cloud-routes=true", "--cluster-cidr=198.18.64.0/18",
			"--route-reconciliation-period=1s"}
	}
	type side struct {
		name, kubeconfig string
		c                cluster
		outrigger        *testenv.Outrigger
		nodes            []string
	}
	a := &side{name: "kubernetes", kubeconfig: testenv.Kubeconfig, c: cluster{client: testenv.Client, ns: testenv.Name("prefix")}}
	b := &side{name: "kubernetes-dev", kubeconfig: other.Kubeconfig, c: cluster{client: other.Client, ns: a.c.ns}}
	a.nodes = []string{testenv.Name("a"), testenv.Name("a")}
	b.nodes = []string{testenv.Name("b"), testenv.Name("b")}
	for _, s := range []*side{a, b} {
		if _, err := s.c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.c.ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, n := range s.nodes {
			if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
				t.Fatal(err)
			}
			backendNode(t, s.c.client, n)
		}
		s.c.create(t, "web", nil)
		s.outrigger = testenv.StartOutrigger(t, cloud, append(flags(s.name), "--kubeconfig="+s.kubeconfig)...)
	}
	routesOf := func(cluster string) map[string]string {
		out := map[string]string{}
		for _, r := range cloud.Routes() {
			if r.Tags["cluster"] == cluster {
				out[r.Name] = r.Destination + " -> " + r.Target
			}
		}
		return out
	}
	testenv.Eventually(t, 60*time.Second, "both clusters routed and load balanced", func() (bool, error) {
		return len(routesOf(a.name)) == len(a.nodes) && len(routesOf(b.name)) == len(b.nodes) &&
			a.c.provisioned(t, cloud, "web") && b.c.provisioned(t, cloud, "web"), nil
	})
	bRoutes, bLBs := routesOf(b.name), lbState(cloud)

	// A's node goes: A deletes its route, and only its route, after
	// listing the table at least twice more.
	if err := testenv.Client.CoreV1().Nodes().Delete(ctx, a.nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	listsBefore := callsBy(cloud, a.outrigger.Caller, "ListRoutes")
	testenv.Eventually(t, 60*time.Second, "cluster kubernetes dropped the route of its deleted node", func() (bool, error) {
		return len(routesOf(a.name)) == len(a.nodes)-1 && callsBy(cloud, a.outrigger.Caller, "ListRoutes") >= listsBefore+2, nil
	})

	changed, written := 0, 0
	if got := routesOf(b.name); fmt.Sprint(got) != fmt.Sprint(bRoutes) {
		changed++
		t.Errorf("cluster kubernetes-dev's routes changed:\n  before %v\n  after  %v", bRoutes, got)
	}
	svcB, _ := b.c.get(t, "web")
	lbB := cloudprovider.DefaultLoadBalancerName(svcB)
	if after := lbState(cloud); after[lbB] != bLBs[lbB] {
		changed++
		t.Errorf("cluster kubernetes-dev's load balancer changed:\n  before %s\n  after  %s", bLBs[lbB], after[lbB])
	}
	for obj, n := range writesBy(cloud, a.outrigger.Caller) {
		if _, isB := bRoutes[obj[len("route/"):]]; isB || obj == "loadbalancer/"+lbB {
			written++
			t.Errorf("cluster kubernetes's Outrigger wrote %d times to %s of cluster kubernetes-dev", n, obj)
		}
	}
	t.Logf("invariants: %d foreign routes and 1 foreign load balancer, %d changed or deleted, %d written to", len(bRoutes), changed, written)
}

// instanceAPI is the local provider's instance API (cloud-config
// instances.url) for the test's "local" machines, logging what it is asked.
type instanceAPI struct {
	mu     sync.Mutex
	states map[string]string
	asked  []string
}

func (a *instanceAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/instances/")
	a.mu.Lock()
	state, ok := a.states[name]
	a.asked = append(a.asked, name)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"code":"InstanceNotFound"}`)
		return
	}
	_, _ = fmt.Fprintf(w, `{"state":%q}`, state)
}

func (a *instanceAPI) set(name, state string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if state == "" {
		delete(a.states, name)
	} else {
		a.states[name] = state
	}
}

// askedSince returns the names asked about after the first n requests.
func (a *instanceAPI) askedSince(n int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked[n:])
}

func (a *instanceAPI) requests() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

const uninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

func tainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == uninitialized })
}

func shutdownTainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "node.cloudprovider.kubernetes.io/shutdown" })
}

func nodeGone(t *testing.T, name string) bool {
	_, err := testenv.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// KEP-5778's split: two CCMs in one cluster, each serving one providerID
// scheme (platform): sim:// nodes on the sim cloud and local:// machines
// behind an instance API. The sim side is another Outrigger (with
// --cloud-provider-platforms=sim), or the upstream CCM, whose sim provider
// answers an error, not "not found", for a providerID it does not serve; or
// one Outrigger runs both providers (--cloud-providers-file).
// Nodes of both join (with a providerID from their kubelet, or without one,
// found by name), go NotReady, are shut down, and are deleted; a node no
// platform knows stays tainted and is never deleted by Outrigger.
func TestTwoPlatformsOneCluster(t *testing.T) {
	for _, simSide := range []string{"outrigger", "upstream", "same outrigger"} {
		t.Run("sim side "+simSide, func(t *testing.T) { twoPlatforms(t, simSide) })
	}
}

func twoPlatforms(t *testing.T, simSide string) {
	cloud := testenv.StartCloud(t)
	api := &instanceAPI{states: map[string]string{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	localConfig := filepath.Join(t.TempDir(), "local.yaml")
	if err := os.WriteFile(localConfig, []byte("instances: {url: "+srv.URL+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodeFlags := "--controllers=cloud-node-controller,cloud-node-lifecycle-controller"
	switch simSide {
	case "same outrigger":
		testenv.StartOutrigger(t, cloud, nodeFlags, "--cloud-providers-file="+providersFile(t, cloud.ConfigFile, localConfig, ""), "--provider-id-wait=1s")
	case "outrigger":
		testenv.StartOutrigger(t, cloud, nodeFlags, "--cloud-provider=local", "--cloud-config="+localConfig,
			"--cloud-provider-platforms=local", "--provider-id-wait=1s")
		testenv.StartOutrigger(t, cloud, nodeFlags, "--cloud-provider-platforms=sim", "--provider-id-wait=1s")
	default:
		testenv.StartOutrigger(t, cloud, nodeFlags, "--cloud-provider=local", "--cloud-config="+localConfig,
			"--cloud-provider-platforms=local", "--provider-id-wait=1s")
		upstreamccm.Start(t, upstreamccm.Build(t), cloud, nodeFlags, "--node-monitor-period=1s")
	}
	// Each CCM beside another says once that a node no platform knows is
	// not its own; one Outrigger running both says it once.
	notOwnedEvents := 2
	if simSide == "same outrigger" {
		notOwnedEvents = 1
	}

	simNamed, simByID := testenv.Name("sim"), testenv.Name("sim")
	locNamed, locByID := testenv.Name("loc"), testenv.Name("loc")
	var simIDs = map[string]string{}
	for _, n := range []string{simNamed, simByID} {
		in, err := cloud.Create(simcloud.CreateRequest{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		simIDs[n] = "sim://" + in.ID
	}
	api.set(locNamed, "running")
	api.set(locByID, "running")
	join := func(name, providerID string) {
		testenv.CreateNode(t, name, func(n *corev1.Node) { n.Spec.ProviderID = providerID })
		testenv.SetReady(t, name, true)
	}
	join(simNamed, "")
	join(simByID, simIDs[simByID])
	join(locNamed, "")
	join(locByID, "local://"+locByID)
	// A node no platform knows (bare metal without a CCM, a virtual
	// kubelet): the upstream CCM, which owns every node, would delete it
	// when NotReady, so it joins only beside another Outrigger.
	bare := ""
	if simSide != "upstream" {
		bare = testenv.Name("bare")
		join(bare, "")
	}

	testenv.Eventually(t, 60*time.Second, "every node initialized by its own platform's CCM", func() (bool, error) {
		for name, scheme := range map[string]string{simNamed: "sim://", simByID: "sim://", locNamed: "local://", locByID: "local://"} {
			n := testenv.GetNode(t, name)
			if tainted(n) || !strings.HasPrefix(n.Spec.ProviderID, scheme) {
				return false, nil
			}
		}
		return bare == "" || len(testenv.Events(t, bare)["NodeNotOwned"]) >= notOwnedEvents, nil
	})
	if got := testenv.GetNode(t, simNamed).Spec.ProviderID; got != simIDs[simNamed] {
		t.Errorf("node %s found by name got providerID %q, want %q", simNamed, got, simIDs[simNamed])
	}
	if bare != "" {
		if n := testenv.GetNode(t, bare); !tainted(n) || n.Spec.ProviderID != "" {
			t.Errorf("the node no platform knows was changed: providerID %q, taints %v", n.Spec.ProviderID, n.Spec.Taints)
		}
	}

	// Every node goes NotReady: two are shut down, two are gone, the one
	// nobody knows is just NotReady.
	asked := api.requests()
	for _, n := range []string{simNamed, simByID, locNamed, locByID, bare} {
		if n != "" {
			testenv.SetReady(t, n, false)
		}
	}
	if _, err := cloud.SetState(strings.TrimPrefix(simIDs[simNamed], "sim://"), simcloud.StateStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := cloud.SetState(strings.TrimPrefix(simIDs[simByID], "sim://"), simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	api.set(locNamed, "stopped")
	api.set(locByID, "")
	testenv.Eventually(t, 60*time.Second, "gone nodes deleted and stopped ones tainted, each by its own CCM", func() (bool, error) {
		return nodeGone(t, simByID) && nodeGone(t, locByID) &&
			shutdownTainted(testenv.GetNode(t, simNamed)) && shutdownTainted(testenv.GetNode(t, locNamed)), nil
	})

	// Invariants: the local side never asked its cloud about a sim:// node
	// once it had its providerID, and nobody deleted a node that exists.
	foreignAsks := 0
	for _, name := range api.askedSince(asked) {
		if name == simNamed || name == simByID {
			foreignAsks++
		}
	}
	if foreignAsks > 0 {
		t.Errorf("the local platform's Outrigger asked its cloud %d times about sim:// nodes", foreignAsks)
	}
	deletedWrongly := 0
	for _, n := range []string{simNamed, locNamed, bare} {
		if n != "" && nodeGone(t, n) {
			deletedWrongly++
			t.Errorf("node %s, whose machine exists or which no platform knows, was deleted", n)
		}
	}
	if bare != "" {
		events := testenv.Events(t, bare)["NodeNotOwned"]
		total := int32(0)
		for _, e := range events {
			total += e.Count
		}
		if total != int32(notOwnedEvents) {
			t.Errorf("the node no platform knows got %d NodeNotOwned Events, want %d (one per CCM)", total, notOwnedEvents)
		}
	}
	if simSide == "same outrigger" {
		// Events say which provider's controller wrote them.
		for name, want := range map[string]string{simNamed: "cloud-node-controller/sim", locNamed: "cloud-node-controller/local"} {
			synced := testenv.Events(t, name)["Synced"]
			if len(synced) == 0 || synced[0].Source.Component != want {
				t.Errorf("node %s: Synced Events %v, want one from %s", name, synced, want)
			}
		}
	}
	t.Logf("invariants (%s beside Outrigger): %d foreign nodes asked about, %d wrongly deleted; 4 own nodes converged", simSide, foreignAsks, deletedWrongly)
}

// providersFile writes a --cloud-providers-file with the sim provider
// (serving Services without a class) and the local one (serving
// localClass, when given).
func providersFile(t *testing.T, simConfig, localConfig, localClass string) string {
	t.Helper()
	f := fmt.Sprintf("apiVersion: outrigger.dev/v1alpha1\nkind: CloudProviders\nproviders:\n"+
		"- name: sim\n  cloudConfig: %s\n- name: local\n  cloudConfig: %s\n", simConfig, localConfig)
	if localClass != "" {
		f += "  loadBalancerClass: " + localClass + "\n"
	} else {
		f += "  loadBalancerClass: example.com/unused\n"
	}
	path := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(path, []byte(f), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// One Outrigger runs two providers (--cloud-providers-file): the sim
// cloud's, serving sim:// nodes and the Services without a class, and the
// local one, serving local:// machines and the Services of its class. Each
// provider's load balancers use only its own nodes; its calls, metrics and
// Events carry its name. The local provider serves two classes, one
// controller each.
func TestSeveralProvidersOneOutrigger(t *testing.T) {
	const localClass, innerClass = "example.com/local", "example.com/local-internal"
	cloud := testenv.StartCloud(t)
	api := &instanceAPI{states: map[string]string{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	localConfig := filepath.Join(t.TempDir(), "local.yaml")
	// A pool of its own, so no other test's VIPs collide with these.
	if err := os.WriteFile(localConfig, []byte("pool: 127.0.107.0/24\nhealthCheck: {disabled: true}\ninstances: {url: "+srv.URL+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cluster{client: testenv.Client, ns: testenv.Name("several")}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	callsOf := func(provider string) float64 {
		return metricstest.Value(t, "outrigger_cloud_calls_total", map[string]string{"provider": provider})
	}
	simBefore, localBefore := callsOf("sim"), callsOf("local")
	file := providersFile(t, cloud.ConfigFile, localConfig, localClass)
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("  loadBalancerClasses: [" + innerClass + "]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testenv.StartOutrigger(t, cloud, "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller",
		"--cloud-providers-file="+file)

	simNode, locNode := testenv.Name("sim"), testenv.Name("loc")
	in, err := cloud.Create(simcloud.CreateRequest{Name: simNode})
	if err != nil {
		t.Fatal(err)
	}
	api.set(locNode, "running")
	for name, id := range map[string]string{simNode: "sim://" + in.ID, locNode: "local://" + locNode} {
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			n.Spec.ProviderID = id
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.107.1"}}
		})
		testenv.SetReady(t, name, true)
	}
	testenv.Eventually(t, 60*time.Second, "both nodes initialized", func() (bool, error) {
		return !tainted(testenv.GetNode(t, simNode)) && !tainted(testenv.GetNode(t, locNode)), nil
	})

	for name, cls := range map[string]*string{"web": nil, "edge": ptr.To(localClass), "inner": ptr.To(innerClass)} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
			Spec: corev1.ServiceSpec{
				Type:              corev1.ServiceTypeLoadBalancer,
				LoadBalancerClass: cls,
				Ports:             []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 18080, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if _, err := c.client.CoreV1().Services(c.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "each Service provisioned by its class's provider", func() (bool, error) {
		for _, name := range []string{"edge", "inner"} {
			s, _ := c.get(t, name)
			if ing := s.Status.LoadBalancer.Ingress; len(ing) != 1 || !strings.HasPrefix(ing[0].IP, "127.0.107.") {
				return false, nil
			}
		}
		return c.provisioned(t, cloud, "web"), nil
	})

	web, _ := c.get(t, "web")
	lb, _ := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(web))
	var backends []string
	for _, b := range lb.Backends {
		backends = append(backends, b.Node)
	}
	if !slices.Equal(backends, []string{simNode}) {
		t.Errorf("the sim load balancer's backends are %v, want only the sim node %s", backends, simNode)
	}
	edge, _ := c.get(t, "edge")
	if _, inSim := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(edge)); inSim {
		t.Errorf("the local class's Service got a load balancer in the sim cloud")
	}
	if sim, local := callsOf("sim")-simBefore, callsOf("local")-localBefore; sim == 0 || local == 0 {
		t.Errorf("cloud calls by provider: sim %v, local %v; want both counted under their own name", sim, local)
	}
	// Events are written after the status, asynchronously: wait for them.
	for name, want := range map[string]string{"web": "service-controller/sim", "edge": "service-controller/local/" + localClass, "inner": "service-controller/local/" + innerClass} {
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("an Event on Service %s from %s", name, want), func() (bool, error) {
			list, err := c.client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err
			}
			return slices.ContainsFunc(list.Items, func(e corev1.Event) bool { return e.Source.Component == want }), nil
		})
	}
}

// Two Outriggers on one cloud and cluster, one for the Services without a
// class and one for class example.com/outrigger. A Service of the class
// becomes ClusterIP while its CCM is down: the class-less Outrigger, which
// now owns it for cleanup, lets it go but leaves the load balancer alone,
// whose ownership record names the other class; the other CCM deletes it
// when it is back.
func TestCleanupLeavesAnotherClassesLoadBalancer(t *testing.T) {
	cloud := testenv.StartCloud(t)
	backendNode(t, testenv.Client, testenv.Name("cleanup-node"))
	c := cluster{client: testenv.Client, ns: testenv.Name("cleanup")}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--controllers=service-lb-controller"}
	classless := testenv.StartOutrigger(t, cloud, flags...)
	classed := testenv.StartOutrigger(t, cloud, append(flags, "--load-balancer-class="+class)...)
	c.create(t, "web", ptr.To(class))
	testenv.Eventually(t, 60*time.Second, "the Service provisioned by its class's Outrigger", func() (bool, error) {
		return c.provisioned(t, cloud, "web"), nil
	})
	svc, _ := c.get(t, "web")
	name := cloudprovider.DefaultLoadBalancerName(svc)

	classed.Stop()
	c.update(t, "web", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
		s.Spec.AllocateLoadBalancerNodePorts, s.Spec.ExternalTrafficPolicy = nil, ""
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].NodePort = 0
		}
	})
	// The class-less Outrigger cleans the Service up: its status.
	testenv.Eventually(t, 60*time.Second, "the status cleared", func() (bool, error) {
		s, _ := c.get(t, "web")
		return len(s.Status.LoadBalancer.Ingress) == 0, nil
	})
	if s, _ := c.get(t, "web"); !slices.Contains(s.Finalizers, "service.kubernetes.io/load-balancer-cleanup") {
		t.Error("the class-less Outrigger removed the finalizer while the other class's load balancer is left")
	}
	if _, ok := cloud.GetLoadBalancer(name); !ok {
		t.Fatal("the class-less Outrigger deleted the load balancer of the other class's Outrigger")
	}
	if n := writesBy(cloud, classless.Caller)["loadbalancer/"+name]; n > 0 {
		t.Errorf("the class-less Outrigger wrote %d times to the other class's load balancer", n)
	}

	// Its own CCM, back, deletes it: the Service left its class.
	testenv.StartOutrigger(t, cloud, append(flags, "--load-balancer-class="+class)...)
	testenv.Eventually(t, 60*time.Second, "the load balancer deleted by its own Outrigger, and the finalizer with it", func() (bool, error) {
		_, ok := cloud.GetLoadBalancer(name)
		s, _ := c.get(t, "web")
		return !ok && !slices.Contains(s.Finalizers, "service.kubernetes.io/load-balancer-cleanup"), nil
	})
}
