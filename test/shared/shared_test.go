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
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
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
	testenv.StartUpstreamCCM(t, testenv.BuildUpstreamCCM(t), cloud, flags...)
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
	// one, but cannot take over the load balancer Outrigger made for
	// "ours-to-theirs" (tagged with Outrigger's class): only its maker may
	// delete it, and the upstream CCM retries with backoff until then.
	theirs = []string{"up-1", "up-2", "up-3", "up-new"}
	ours = []string{"ours-1", "ours-2", "up-to-ours"}
	testenv.Eventually(t, 60*time.Second, "the upstream CCM converged while Outrigger was down", func() (bool, error) {
		_, gone := c.get(t, "ours-gone")
		for _, name := range theirs {
			if !c.provisioned(t, cloud, name) {
				return false, nil
			}
		}
		return !gone, nil
	})
	before := lbState(cloud)
	moved, _ := c.get(t, "ours-to-theirs")
	if lb, ok := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(moved)); !ok || lb.Tags["load-balancer-class"] != class {
		t.Fatalf("the load balancer Outrigger made for ours-to-theirs: %v %v; want it kept, tagged with Outrigger's class", lb.Tags, ok)
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
				return false, nil
			}
		}
		return reads >= len(theirs)+1, nil
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
			"--allocate-node-cidrs=true", "--configure-cloud-routes=true", "--cluster-cidr=10.244.0.0/16",
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
