//go:build integration

// Package switchover checks that a cluster moves from the upstream
// cloud-controller-manager to Outrigger and back with nothing recreated:
// the real upstream CCM (bench/upstream-ccm, k8s.io/cloud-provider's own
// command and controllers with the sim provider) and Outrigger take turns
// on the same API server and sim cloud.
package switchover

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/upstreamccm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// The flags both CCMs run with: the same controllers, cluster CIDR and
// periods.
var common = []string{
	"--cluster-cidr=198.18.64.0/18", "--allocate-node-cidrs=true", "--configure-cloud-routes=true",
	"--route-reconciliation-period=1s", "--node-monitor-period=1s",
	"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller,node-route-controller",
}

// state is everything a switch must not change.
type state struct {
	nodes    map[string]string // name -> UID, providerID, labels, addresses, taints, podCIDRs
	services map[string]string // name -> UID, finalizers, ingress
	lbs      map[string]string // name -> VIP, listeners, backends (as sets)
	routes   []string
}

func capture(t *testing.T, cloud *testenv.Cloud, ns string, nodes []string) state {
	t.Helper()
	s := state{nodes: map[string]string{}, services: map[string]string{}, lbs: map[string]string{}}
	for _, name := range nodes {
		n := testenv.GetNode(t, name)
		labels := slices.Sorted(maps.Keys(n.Labels))
		var lv []string
		for _, k := range labels {
			lv = append(lv, k+"="+n.Labels[k])
		}
		var taints []string
		for _, tn := range n.Spec.Taints {
			taints = append(taints, tn.Key)
		}
		s.nodes[name] = fmt.Sprint(n.UID, " ", n.Spec.ProviderID, " ", lv, " ", n.Status.Addresses, " ", taints, " ", n.Spec.PodCIDRs)
	}
	list, err := testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range list.Items {
		var ingress []string
		for _, in := range svc.Status.LoadBalancer.Ingress {
			mode := ""
			if in.IPMode != nil {
				mode = string(*in.IPMode)
			}
			ingress = append(ingress, in.IP+"/"+in.Hostname+"/"+mode)
		}
		s.services[svc.Name] = fmt.Sprint(svc.UID, " ", svc.Finalizers, " ", ingress)
	}
	for _, lb := range cloud.LoadBalancers() {
		var backends []string
		for _, b := range lb.Backends {
			backends = append(backends, b.Node+"@"+b.Address)
		}
		sort.Strings(backends)
		s.lbs[lb.Name] = fmt.Sprint(lb.VIP, " ", lb.Listeners, " ", backends, " ", lb.SourceRanges, " ", lb.Tags)
	}
	for _, r := range cloud.Routes() {
		s.routes = append(s.routes, r.Name+" "+r.Destination+" "+r.Target)
	}
	return s
}

func (s state) diff(o state) []string {
	var out []string
	cmp := func(kind string, a, b map[string]string) {
		for k := range a {
			if a[k] != b[k] {
				out = append(out, fmt.Sprintf("%s %s:\n  before: %s\n  after:  %s", kind, k, a[k], b[k]))
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				out = append(out, fmt.Sprintf("%s %s appeared: %s", kind, k, b[k]))
			}
		}
	}
	cmp("node", s.nodes, o.nodes)
	cmp("service", s.services, o.services)
	cmp("load balancer", s.lbs, o.lbs)
	if !slices.Equal(s.routes, o.routes) {
		out = append(out, fmt.Sprintf("routes:\n  before: %v\n  after:  %v", s.routes, o.routes))
	}
	return out
}

// readOnly are the calls a CCM taking over may make: reads, and ensures
// that leave the load balancer as it was (checked by the state diff).
var readOnly = []string{"GetInstance", "ListInstances", "BatchGetInstances", "GetPodCIDRs", "ListRoutes",
	"GetLoadBalancer", "ListLoadBalancers", "PutLoadBalancer", "SetBackends"}

// settle waits until the CCM that just started has looked at everything:
// ensured every Service (both CCMs do on start), asked the cloud about the
// nodes, and made two more route passes (every --route-reconciliation-period)
// after its first: anything it would change, it has changed by then.
func settle(t *testing.T, cloud *testenv.Cloud, services, nodes int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "the new CCM's first passes", func() (bool, error) {
		c := cloud.Calls().ByOp
		return c["PutLoadBalancer"] >= int64(services) && c["ListRoutes"] >= 1 &&
			(c["BatchGetInstances"] >= 1 || c["GetInstance"] >= int64(nodes)), nil
	})
	routePasses(t, cloud, 2)
}

// routePasses waits until the route controller has listed the routes n
// more times: n full passes, each of which would have made any change due.
func routePasses(t *testing.T, cloud *testenv.Cloud, n int64) {
	t.Helper()
	from := cloud.Calls().ByOp["ListRoutes"]
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d more route passes", n), func() (bool, error) {
		return cloud.Calls().ByOp["ListRoutes"] >= from+n, nil
	})
}

func checkNothingChanged(t *testing.T, who string, before, after state, calls simcloud.Calls) {
	t.Helper()
	for _, d := range before.diff(after) {
		t.Errorf("%s changed the cluster or the cloud: %s", who, d)
	}
	for op, n := range calls.ByOp {
		if !slices.Contains(readOnly, op) {
			t.Errorf("%s made %d %s calls taking over; only reads and no-op ensures are expected (calls: %v)", who, n, op, calls.ByOp)
		}
	}
}

func TestSwitchUpstreamToOutriggerAndBack(t *testing.T) {
	bin := upstreamccm.Build(t)
	cloud := testenv.StartCloud(t)
	var nodes []string
	for i := range 3 {
		name := testenv.Name("sw")
		if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		// The pod CIDRs a kube-controller-manager would have given.
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			cidr := fmt.Sprintf("198.18.%d.0/24", 64+i+1)
			n.Spec.PodCIDR, n.Spec.PodCIDRs = cidr, []string{cidr}
		})
		nodes = append(nodes, name)
	}
	ns := testenv.Name("sw")
	if _, err := testenv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// 1. The upstream CCM runs the cluster.
	up := upstreamccm.Start(t, bin, cloud, common...)
	testenv.Eventually(t, 60*time.Second, "nodes initialized and routed by the upstream CCM", func() (bool, error) {
		for _, name := range nodes {
			n := testenv.GetNode(t, name)
			if n.Spec.ProviderID == "" || len(n.Spec.Taints) > 0 && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return strings.HasPrefix(t.Key, "node.cloudprovider.kubernetes.io/")
			}) {
				return false, nil
			}
		}
		return len(cloud.Routes()) == len(nodes), nil
	})
	const services = 2
	for i := range services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: ns},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if _, err := testenv.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "load balancers provisioned by the upstream CCM", func() (bool, error) {
		list, err := testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, nil
			}
		}
		return len(cloud.LoadBalancers()) == services, nil
	})
	routePasses(t, cloud, 2) // the upstream CCM's routes are all there
	before := capture(t, cloud, ns, nodes)
	up.Stop(t)

	// 2. Outrigger takes over: nothing changes, the cloud sees only reads.
	cloud.ResetCalls()
	out := testenv.StartOutrigger(t, cloud, common...)
	settle(t, cloud, services, len(nodes))
	checkNothingChanged(t, "Outrigger", before, capture(t, cloud, ns, nodes), cloud.Calls())

	// The cluster still works under Outrigger: a new node is initialized.
	extra := testenv.Name("sw")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: extra}); err != nil {
		t.Fatal(err)
	}
	if err := kubeletsim.Register(ctx, testenv.Client, extra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Client.CoreV1().Nodes().Delete(ctx, extra, metav1.DeleteOptions{}) })
	testenv.Eventually(t, 30*time.Second, "a new node initialized by Outrigger", func() (bool, error) {
		return testenv.GetNode(t, extra).Spec.ProviderID != "", nil
	})
	nodes = append(nodes, extra)
	testenv.Eventually(t, 30*time.Second, "the new node behind every load balancer", func() (bool, error) {
		for _, lb := range cloud.LoadBalancers() {
			if !slices.ContainsFunc(lb.Backends, func(b simcloud.Backend) bool { return b.Node == extra }) {
				return false, fmt.Errorf("load balancer %s backends %v", lb.Name, lb.Backends)
			}
		}
		return true, nil
	})
	routePasses(t, cloud, 2)
	before = capture(t, cloud, ns, nodes)
	out.Stop()

	// 3. And back to upstream: nothing changes either.
	cloud.ResetCalls()
	upstreamccm.Start(t, bin, cloud, common...)
	settle(t, cloud, services, len(nodes))
	checkNothingChanged(t, "the upstream CCM", before, capture(t, cloud, ns, nodes), cloud.Calls())
}
