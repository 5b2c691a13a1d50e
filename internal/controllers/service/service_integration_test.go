//go:build integration

package service_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testobj"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// startOutrigger runs only this controller, with a short node sync window.
func startOutrigger(t *testing.T, c *testenv.Cloud, flags ...string) *testenv.Outrigger {
	t.Helper()
	return testenv.StartOutrigger(t, c, append([]string{"--controllers=service-lb-controller"}, flags...)...)
}

// namespace creates a namespace for one test; when the test ends its
// Services are deleted while Outrigger still runs (cleanups run last-in
// first-out, so call it after startOutrigger) and waited for.
func namespace(t *testing.T) string {
	t.Helper()
	ns := testenv.Name("lb")
	createNamespace(t, ns)
	return ns
}

// createNamespace is namespace with a chosen name.
func createNamespace(t *testing.T, ns string) {
	t.Helper()
	if _, err := testenv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		list, err := testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		for _, s := range list.Items {
			_ = testenv.Client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			list, err = testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(list.Items) == 0 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("services of %s not deleted: %d left (their finalizers were not removed)", ns, len(list.Items))
	})
}

// node registers an initialized node with an InternalIP.
func node(t *testing.T, ip string, mutate func(*corev1.Node)) string {
	t.Helper()
	name := testenv.Name("n")
	testenv.CreateNode(t, name, func(n *corev1.Node) {
		n.Spec.Taints = nil
		n.Spec.ProviderID = "sim://" + name
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if mutate != nil {
			mutate(n)
		}
	})
	return name
}

func lbService(ns, name string, ports ...int32) *corev1.Service {
	return testobj.LBService(ns, name, testobj.Selector(), testobj.Ports(ports...))
}

func create(t *testing.T, s *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := testenv.Client.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func get(t *testing.T, ns, name string) *corev1.Service {
	t.Helper()
	s, err := testenv.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func update(t *testing.T, ns, name string, mutate func(*corev1.Service)) {
	t.Helper()
	for range 10 {
		s := get(t, ns, name)
		mutate(s)
		_, err := testenv.Client.CoreV1().Services(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("too many conflicts updating the service")
}

// cloudLB is the sim cloud's load balancer for a Service.
func cloudLB(c *testenv.Cloud, s *corev1.Service) (simcloud.LoadBalancer, bool) {
	return c.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(s))
}

// waitProvisioned waits until the Service has an ingress IP equal to its
// cloud load balancer's VIP and the condition is gone, and returns both.
func waitProvisioned(t *testing.T, c *testenv.Cloud, ns, name string) (*corev1.Service, simcloud.LoadBalancer) {
	t.Helper()
	var (
		svc *corev1.Service
		lb  simcloud.LoadBalancer
	)
	testenv.Eventually(t, 30*time.Second, ns+"/"+name+" provisioned", func() (bool, error) {
		svc = get(t, ns, name)
		var ok bool
		lb, ok = cloudLB(c, svc)
		ing := svc.Status.LoadBalancer.Ingress
		return ok && len(ing) == 1 && ing[0].IP == lb.VIP &&
			meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady) == nil, nil
	})
	return svc, lb
}

func backendNames(lb simcloud.LoadBalancer) []string {
	var out []string
	for _, b := range lb.Backends {
		out = append(out, b.Node)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func listeners(lb simcloud.LoadBalancer) string {
	var out []string
	for _, l := range lb.Listeners {
		out = append(out, fmt.Sprintf("%s/%d", l.Protocol, l.Port))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func TestCreateUpdateDelete(t *testing.T) {
	c := testenv.StartCloud(t)
	n1 := node(t, "198.18.1.1", nil)
	startOutrigger(t, c)
	ns := namespace(t)

	create(t, lbService(ns, "web", 80, 443))
	svc, lb := waitProvisioned(t, c, ns, "web")
	if !slices.Contains(svc.Finalizers, service.Finalizer) {
		t.Errorf("finalizers = %v, want %s", svc.Finalizers, service.Finalizer)
	}
	if got := svc.Status.LoadBalancer.Ingress[0].IPMode; got == nil || *got != corev1.LoadBalancerIPModeVIP {
		t.Errorf("ipMode = %v, want VIP", got)
	}
	if got := listeners(lb); got != "TCP/443,TCP/80" {
		t.Errorf("listeners = %s", got)
	}
	for _, l := range lb.Listeners {
		for _, p := range svc.Spec.Ports {
			if p.Port == l.Port && p.NodePort != l.NodePort {
				t.Errorf("listener %d forwards to node port %d, want %d", l.Port, l.NodePort, p.NodePort)
			}
		}
	}
	if got := backendNames(lb); !slices.Equal(got, []string{n1}) || lb.Backends[0].Address != "198.18.1.1" {
		t.Errorf("backends = %+v", lb.Backends)
	}
	waitEvents(t, "web", service.EventEnsuring, service.EventEnsured)
	// Recorded as upstream's controller records them.
	for reason, events := range testenv.Events(t, "web") {
		for _, e := range events {
			if e.Source.Component != service.EventComponent || service.EventComponent != "service-controller" {
				t.Errorf("event %s from %q, want service-controller", reason, e.Source.Component)
			}
		}
	}

	// Spec changes that matter reach the cloud; the VIP stays.
	update(t, ns, "web", func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53})
		s.Spec.LoadBalancerSourceRanges = []string{"192.0.2.0/24"}
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	testenv.Eventually(t, 20*time.Second, "ports, source ranges and affinity applied", func() (bool, error) {
		got, _ := cloudLB(c, svc)
		return listeners(got) == "TCP/443,TCP/80,UDP/53" && slices.Equal(got.SourceRanges, []string{"192.0.2.0/24"}) && got.SessionAffinity == "ClientIP", nil
	})
	update(t, ns, "web", func(s *corev1.Service) { s.Spec.Ports = s.Spec.Ports[1:] })
	testenv.Eventually(t, 20*time.Second, "a port removed", func() (bool, error) {
		got, _ := cloudLB(c, svc)
		return listeners(got) == "TCP/443,UDP/53", nil
	})
	update(t, ns, "web", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	testenv.Eventually(t, 20*time.Second, "health check node port applied", func() (bool, error) {
		s := get(t, ns, "web")
		got, _ := cloudLB(c, svc)
		return s.Spec.HealthCheckNodePort != 0 && got.HealthCheckPort == s.Spec.HealthCheckNodePort, nil
	})
	if got, _ := cloudLB(c, svc); got.VIP != lb.VIP {
		t.Errorf("VIP changed from %s to %s on update", lb.VIP, got.VIP)
	}

	// Delete: the load balancer goes first, then the Service.
	if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "service and load balancer gone", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		_, exists := cloudLB(c, svc)
		return apierrors.IsNotFound(err) && !exists, nil
	})
	if n := len(c.LoadBalancers()); n != 0 {
		t.Errorf("%d load balancers left in the cloud", n)
	}
}

// waitEvents waits for Events of each reason about the object named name
// (Events are written asynchronously).
func waitEvents(t *testing.T, name string, reasons ...string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("events %v about %s", reasons, name), func() (bool, error) {
		ev := testenv.Events(t, name)
		for _, r := range reasons {
			if len(ev[r]) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// deleteAndWait deletes a Service and waits until its finalizer let it go.
func deleteAndWait(t *testing.T, ns, name string) {
	t.Helper()
	if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, ns+"/"+name+" deleted", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func TestTypeChangeAwayFromLoadBalancer(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.1.2", nil)
	startOutrigger(t, c)
	ns := namespace(t)
	create(t, lbService(ns, "app", 80))
	svc, _ := waitProvisioned(t, c, ns, "app")

	update(t, ns, "app", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeClusterIP
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].NodePort = 0
		}
	})
	testenv.Eventually(t, 20*time.Second, "load balancer deleted, finalizer and ingress removed", func() (bool, error) {
		s := get(t, ns, "app")
		_, exists := cloudLB(c, svc)
		return !exists && !slices.Contains(s.Finalizers, service.Finalizer) && len(s.Status.LoadBalancer.Ingress) == 0, nil
	})
	waitEvents(t, "app", service.EventDeleting, service.EventDeleted)
}

// Outrigger stops after the cloud created the load balancer and before the
// Service's status was written; the next Outrigger finds the same load
// balancer (no duplicate) and the Service gets its VIP.
func TestCrashBetweenCloudCreateAndStatus(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.1.3", nil)
	created := make(chan simcloud.LoadBalancer, 1)
	c.SetAfterPutHook(func(reqCtx context.Context, lb simcloud.LoadBalancer) {
		select {
		case created <- lb:
		default:
		}
		<-reqCtx.Done() // never answer: the caller dies first
	})
	first := startOutrigger(t, c)
	ns := namespace(t)
	create(t, lbService(ns, "crash", 80))
	var lb simcloud.LoadBalancer
	select {
	case lb = <-created:
	case <-time.After(30 * time.Second):
		t.Fatal("no load balancer created")
	}
	first.Stop()
	c.SetAfterPutHook(nil)
	if s := get(t, ns, "crash"); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("status written before the cloud answered: %v", s.Status.LoadBalancer)
	}

	startOutrigger(t, c)
	svc, got := waitProvisioned(t, c, ns, "crash")
	if got.VIP != lb.VIP || len(c.LoadBalancers()) != 1 {
		t.Errorf("after restart: VIP %s (was %s), %d load balancers in the cloud, want the same one", got.VIP, lb.VIP, len(c.LoadBalancers()))
	}
	if !slices.Contains(svc.Finalizers, service.Finalizer) {
		t.Errorf("finalizer missing")
	}
	deleteAndWait(t, ns, "crash")
	if n := len(c.LoadBalancers()); n != 0 {
		t.Errorf("%d load balancers left after delete", n)
	}
}

func TestLoadBalancerClass(t *testing.T) {
	defaultCloud, classCloud := testenv.StartCloud(t), testenv.StartCloud(t)
	node(t, "198.18.12.4", nil)
	// One worker each: an Outrigger then handles Services one at a time,
	// in the order it learnt of them, so a Service it provisioned proves
	// it has handled every Service created before.
	startOutrigger(t, defaultCloud, "--concurrent-service-syncs=1")
	startOutrigger(t, classCloud, "--load-balancer-class=example.com/internal", "--concurrent-service-syncs=1")
	ns := namespace(t)

	create(t, lbService(ns, "plain", 80))
	classy := lbService(ns, "classy", 80)
	classy.Spec.LoadBalancerClass = ptr.To("example.com/internal")
	create(t, classy)
	plain, _ := waitProvisioned(t, defaultCloud, ns, "plain")
	classySvc, _ := waitProvisioned(t, classCloud, ns, "classy")
	if _, ok := cloudLB(classCloud, plain); ok {
		t.Error("the class-owning Outrigger provisioned a Service without a class")
	}
	if _, ok := cloudLB(defaultCloud, classySvc); ok {
		t.Error("the default Outrigger provisioned a Service of another class")
	}

	// A Service of a class nobody here owns, then one more of each
	// Outrigger's own: once both of those are provisioned, each Outrigger
	// has had the other class's Service in hand and left it alone.
	other := lbService(ns, "other", 80)
	other.Spec.LoadBalancerClass = ptr.To("example.com/someone-else")
	create(t, other)
	create(t, lbService(ns, "plain-after", 80))
	classyAfter := lbService(ns, "classy-after", 80)
	classyAfter.Spec.LoadBalancerClass = ptr.To("example.com/internal")
	create(t, classyAfter)
	bothHandled := func() bool {
		for _, name := range []string{"plain-after", "classy-after"} {
			if len(get(t, ns, name).Status.LoadBalancer.Ingress) != 1 {
				return false
			}
		}
		return true
	}
	testenv.ConsistentlyUntil(t, 30*time.Second, "a Service of a class nobody here owns left untouched", bothHandled, func() error {
		o := get(t, ns, "other")
		_, inDefault := cloudLB(defaultCloud, o)
		_, inClass := cloudLB(classCloud, o)
		if len(o.Finalizers) != 0 || len(o.Status.LoadBalancer.Ingress) != 0 || inDefault || inClass {
			return fmt.Errorf("finalizers %v, status %v, load balancer in the default cloud %t, in the class's %t",
				o.Finalizers, o.Status.LoadBalancer, inDefault, inClass)
		}
		return nil
	})
	if n := len(defaultCloud.LoadBalancers()) + len(classCloud.LoadBalancers()); n != 4 {
		t.Errorf("%d load balancers in the two clouds, want 4 (two Services of each class)", n)
	}

	// Deleting the class's Service: its owner cleans up, the other leaves it.
	if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, "classy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "classy's load balancer deleted by its owner", func() (bool, error) {
		_, ok := cloudLB(classCloud, classySvc)
		return !ok, nil
	})
}

func TestBackendNodes(t *testing.T) {
	c := testenv.StartCloud(t)
	plain := node(t, "198.18.2.1", nil)
	node(t, "198.18.2.2", func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "true" })
	kept := node(t, "198.18.2.3", func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "false" })
	node(t, "198.18.2.4", func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: service.ToBeDeletedTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
	})
	notReady := node(t, "198.18.2.5", nil)
	testenv.SetReady(t, notReady, false)
	startOutrigger(t, c)
	ns := namespace(t)
	create(t, lbService(ns, "b", 80))
	svc, lb := waitProvisioned(t, c, ns, "b")
	if got, want := backendNames(lb), sorted(plain, kept, notReady); !slices.Equal(got, want) {
		t.Fatalf("backends = %v, want %v (not the excluded or autoscaler-tainted nodes; NotReady counts)", got, want)
	}

	// Excluding a node later updates the backends without a full ensure.
	puts := c.Calls().ByOp["PutLoadBalancer"]
	syncs := metricstest.Value(t, "service_controller_loadbalancer_sync_total", nil)
	hostLatency := metricstest.Value(t, "service_controller_update_loadbalancer_host_latency_seconds", nil)
	nodeSyncs := metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil)
	patchNode(t, plain, func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "true" })
	testenv.Eventually(t, 20*time.Second, "excluded node removed from the backends", func() (bool, error) {
		got, _ := cloudLB(c, svc)
		return slices.Equal(backendNames(got), sorted(kept, notReady)), nil
	})
	if got := c.Calls().ByOp["PutLoadBalancer"]; got != puts {
		t.Errorf("a node change made %d full ensures, want only backend updates", got-puts)
	}
	waitEvents(t, "b", service.EventUpdated)
	if got := metricstest.Value(t, "service_controller_loadbalancer_sync_total", nil); got <= syncs {
		t.Errorf("loadbalancer_sync_total = %v after a backend update, was %v", got, syncs)
	}
	if got := metricstest.Value(t, "service_controller_update_loadbalancer_host_latency_seconds", nil); got <= hostLatency {
		t.Errorf("update_loadbalancer_host_latency_seconds has %v samples after a backend update, had %v", got, hostLatency)
	}
	testenv.Eventually(t, 10*time.Second, "a node sync observed", func() (bool, error) {
		return metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil) > nodeSyncs, nil
	})

	// No eligible node left: provisioned, but the condition says why no
	// traffic flows.
	for _, n := range []string{kept, notReady} {
		patchNode(t, n, func(n *corev1.Node) { n.Labels[corev1.LabelNodeExcludeBalancers] = "true" })
	}
	testenv.Eventually(t, 20*time.Second, "NoNodes condition", func() (bool, error) {
		cond := meta.FindStatusCondition(get(t, ns, "b").Status.Conditions, service.ConditionLoadBalancerReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == service.ConditionReasonNodes, nil
	})
	patchNode(t, kept, func(n *corev1.Node) { delete(n.Labels, corev1.LabelNodeExcludeBalancers) })
	waitProvisioned(t, c, ns, "b")
}

// As upstream, the Cluster Autoscaler's taint does not by itself update the
// load balancers (the node's connections get to drain while the autoscaler
// drains its pods); the node leaves the backends at the next sync for any
// other reason.
func TestAutoscalerTaintWaitsForNextSync(t *testing.T) {
	c := testenv.StartCloud(t)
	plain := node(t, "198.18.10.1", nil)
	doomed := node(t, "198.18.10.2", nil)
	rounds := metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil)
	startOutrigger(t, c)
	ns := namespace(t)
	create(t, lbService(ns, "t", 80))
	svc, lb := waitProvisioned(t, c, ns, "t")
	// The nodes seen at start make one node sync; it must be over before
	// the taint, or it would pick the taint up.
	testenv.Eventually(t, 10*time.Second, "the first node sync over", func() (bool, error) {
		return metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil) > rounds, nil
	})
	if got, want := backendNames(lb), sorted(plain, doomed); !slices.Equal(got, want) {
		t.Fatalf("backends = %v, want %v", got, want)
	}
	updates := c.Calls().ByOp["SetBackends"]
	patchNode(t, doomed, func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: service.ToBeDeletedTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	})
	// The controller has seen the taint once a Service changed since
	// leaves the node out: only a node event makes it list the nodes
	// again, and only the taint happened. Had the taint started a node
	// sync, it would be queued now, due one window (1s) later.
	create(t, lbService(ns, "seen", 80))
	testenv.Eventually(t, 20*time.Second, "a Service ensured after the taint leaves the tainted node out", func() (bool, error) {
		s := get(t, ns, "seen")
		lb, ok := cloudLB(c, s)
		if ok && len(s.Status.LoadBalancer.Ingress) == 1 && slices.Equal(backendNames(lb), sorted(plain)) {
			return true, nil
		}
		if ok && len(s.Status.LoadBalancer.Ingress) == 1 && len(lb.Listeners) == len(s.Spec.Ports) {
			// Ensured (the last change too) before the taint reached the
			// controller: change it again (its ports are part of what
			// its load balancer is built from).
			update(t, ns, "seen", func(s *corev1.Service) {
				p := s.Spec.Ports[0]
				p.Name, p.Port = fmt.Sprintf("p%d", p.Port+1), p.Port+1
				s.Spec.Ports = append(s.Spec.Ports, p)
			})
		}
		return false, fmt.Errorf("its backends: %v", backendNames(lb))
	})
	syncs := metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil)
	testenv.Consistently(t, 30*time.Second, "the tainted node still a backend, no backend update, no node sync",
		quotaClock(t, c, ns), 3, func() error {
			got, _ := cloudLB(c, svc)
			if !slices.Equal(backendNames(got), sorted(plain, doomed)) {
				return fmt.Errorf("backends %v", backendNames(got))
			}
			if n := c.Calls().ByOp["SetBackends"]; n != updates {
				return fmt.Errorf("%d backend updates", n-updates)
			}
			if n := metricstest.Value(t, "service_controller_nodesync_latency_seconds", nil); n != syncs {
				return fmt.Errorf("%v node syncs", n-syncs)
			}
			return nil
		})
	c.SetSettings(simcloud.Settings{})
	joined := node(t, "198.18.10.3", nil)
	testenv.Eventually(t, 20*time.Second, "the next sync drops the tainted node", func() (bool, error) {
		got, _ := cloudLB(c, svc)
		return slices.Equal(backendNames(got), sorted(plain, joined)), nil
	})
}

// quotaClock fills the cloud's load balancer quota and creates in ns a
// Service the quota refuses, and returns the count of load balancer
// creations asked of the cloud since. The controller retries a failed
// Service with its backoff (1s, then 2s): three refusals take three seconds
// of the controller's own timers and prove its work queue is being served,
// as a fixed sleep cannot. Nothing else may create load balancers meanwhile.
func quotaClock(t *testing.T, c *testenv.Cloud, ns string) func() float64 {
	t.Helper()
	c.SetSettings(simcloud.Settings{MaxLoadBalancers: len(c.LoadBalancers())})
	from := c.Calls().ByOp["PutLoadBalancer"]
	create(t, lbService(ns, "quota-clock", 80))
	return func() float64 { return float64(c.Calls().ByOp["PutLoadBalancer"] - from) }
}

func patchNode(t *testing.T, name string, mutate func(*corev1.Node)) {
	t.Helper()
	for range 10 {
		n := testenv.GetNode(t, name)
		mutate(n)
		_, err := testenv.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("too many conflicts")
}

// A burst of node joins becomes a bounded number of backend updates per
// Service, counted at the cloud, not one per node event.
func TestNodeEventsAreCoalesced(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.3.1", nil)
	startOutrigger(t, c)
	ns := namespace(t)
	const services, joins = 5, 40
	var svcs []*corev1.Service
	for i := range services {
		create(t, lbService(ns, fmt.Sprintf("s%d", i), 80))
	}
	for i := range services {
		s, _ := waitProvisioned(t, c, ns, fmt.Sprintf("s%d", i))
		svcs = append(svcs, s)
	}
	c.ResetCalls()
	for i := range joins {
		node(t, fmt.Sprintf("198.18.3.%d", i+101), nil)
	}
	testenv.Eventually(t, 30*time.Second, "every load balancer has all nodes", func() (bool, error) {
		for _, s := range svcs {
			lb, _ := cloudLB(c, s)
			if len(lb.Backends) != joins+1 {
				return false, nil
			}
		}
		return true, nil
	})
	// One more node joins: node events reach the controller in order, and
	// a Service is never reconciled twice at once, so once every load
	// balancer has this node, whatever the burst made due has been done.
	last := node(t, "198.18.13.1", nil)
	allHaveLast := func() bool {
		for _, s := range svcs {
			lb, _ := cloudLB(c, s)
			if !slices.ContainsFunc(lb.Backends, func(b simcloud.Backend) bool { return b.Node == last }) {
				return false
			}
		}
		return true
	}
	// The joins take a few hundred ms; with a 1s window that is one update
	// per Service, two if the burst straddles a window; one more for the
	// last node.
	testenv.ConsistentlyUntil(t, 30*time.Second, "a bounded number of backend updates, no full ensure", allHaveLast, func() error {
		calls := c.Calls().ByOp
		if got := calls["SetBackends"]; got > 3*services {
			return fmt.Errorf("%d node joins made %d UpdateLoadBalancer calls for %d services, want at most %d", joins+1, got, services, 3*services)
		}
		if calls["PutLoadBalancer"] != 0 {
			return fmt.Errorf("node joins made %d full ensures", calls["PutLoadBalancer"])
		}
		return nil
	})
}

func condition(t *testing.T, ns, name string) *metav1.Condition {
	return meta.FindStatusCondition(get(t, ns, name).Status.Conditions, service.ConditionLoadBalancerReady)
}

func TestQuotaExceeded(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.4.1", nil)
	c.SetSettings(simcloud.Settings{MaxLoadBalancers: 1})
	startOutrigger(t, c)
	ns := namespace(t)
	create(t, lbService(ns, "first", 80))
	waitProvisioned(t, c, ns, "first")
	create(t, lbService(ns, "second", 80))
	testenv.Eventually(t, 20*time.Second, "QuotaExceeded condition and event", func() (bool, error) {
		cond := condition(t, ns, "second")
		return cond != nil && cond.Reason == provider.ReasonQuotaExceeded && strings.Contains(cond.Message, "quota") &&
			len(testenv.Events(t, "second")[service.EventSyncFailed]) > 0, nil
	})
	if s := get(t, ns, "second"); !slices.Contains(s.Finalizers, service.Finalizer) || len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("pending service: finalizers %v, ingress %v", s.Finalizers, s.Status.LoadBalancer.Ingress)
	}
	c.SetSettings(simcloud.Settings{MaxLoadBalancers: 2})
	waitProvisioned(t, c, ns, "second") // retried with backoff, condition cleared
}

func TestMalformedAnnotation(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.5.1", nil)
	startOutrigger(t, c)
	ns := namespace(t)
	bad := lbService(ns, "bad", 80)
	bad.Annotations = map[string]string{sim.AnnotationIdleTimeout: "soon"}
	create(t, bad)
	testenv.Eventually(t, 20*time.Second, "InvalidAnnotation condition", func() (bool, error) {
		cond := condition(t, ns, "bad")
		return cond != nil && cond.Reason == provider.ReasonInvalidAnnotation && strings.Contains(cond.Message, sim.AnnotationIdleTimeout), nil
	})
	if n := len(c.LoadBalancers()); n != 0 {
		t.Errorf("%d load balancers created for an invalid Service", n)
	}
	update(t, ns, "bad", func(s *corev1.Service) { s.Annotations[sim.AnnotationIdleTimeout] = "30" })
	_, lb := waitProvisioned(t, c, ns, "bad")
	if lb.IdleTimeoutSeconds != 30 {
		t.Errorf("idle timeout = %d", lb.IdleTimeoutSeconds)
	}
}

// Throttling, injected errors and a hung cloud: every Service ends up with
// exactly one load balancer.
func TestCloudFaults(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.6.1", nil)
	c.SetSettings(simcloud.Settings{Hang: true})
	startOutrigger(t, c, "--cloud-call-timeout=1s")
	ns := namespace(t)
	create(t, lbService(ns, "hung", 80))
	testenv.Eventually(t, 20*time.Second, "CloudTimeout condition", func() (bool, error) {
		cond := condition(t, ns, "hung")
		return cond != nil && cond.Reason == cloud.ReasonTimeout, nil
	})

	c.SetSettings(simcloud.Settings{RateLimit: 5, RateBurst: 1, ErrorRate: 0.2})
	const n = 10
	for i := range n {
		create(t, lbService(ns, fmt.Sprintf("f%d", i), 80))
	}
	for i := range n {
		waitProvisionedWithin(t, c, ns, fmt.Sprintf("f%d", i), 90*time.Second)
	}
	waitProvisionedWithin(t, c, ns, "hung", 90*time.Second)
	if got := len(c.LoadBalancers()); got != n+1 {
		t.Errorf("%d load balancers in the cloud for %d services", got, n+1)
	}
	if c.Calls().Throttled == 0 {
		t.Error("the cloud never throttled: the test did not test throttling")
	}
	c.SetSettings(simcloud.Settings{})
}

// TestProvisioningCondition: a first EnsureLoadBalancer that runs past a
// second shows as Provisioning until the cloud answers (here: the call's
// deadline passes, and the condition says CloudTimeout).
func TestProvisioningCondition(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.6.2", nil)
	c.SetSettings(simcloud.Settings{Hang: true})
	startOutrigger(t, c, "--cloud-call-timeout=5s")
	ns := namespace(t)
	create(t, lbService(ns, "slow", 80))
	testenv.Eventually(t, 20*time.Second, "Provisioning condition", func() (bool, error) {
		cond := condition(t, ns, "slow")
		return cond != nil && cond.Reason == service.ConditionReasonProvisioning, nil
	})
	testenv.Eventually(t, 20*time.Second, "CloudTimeout condition", func() (bool, error) {
		cond := condition(t, ns, "slow")
		return cond != nil && cond.Reason == cloud.ReasonTimeout, nil
	})
	c.SetSettings(simcloud.Settings{})
	waitProvisionedWithin(t, c, ns, "slow", 90*time.Second)
}

func waitProvisionedWithin(t *testing.T, c *testenv.Cloud, ns, name string, d time.Duration) {
	t.Helper()
	testenv.Eventually(t, d, ns+"/"+name+" provisioned", func() (bool, error) {
		svc := get(t, ns, name)
		lb, ok := cloudLB(c, svc)
		ing := svc.Status.LoadBalancer.Ingress
		cond := condition(t, ns, name)
		return ok && len(ing) == 1 && ing[0].IP == lb.VIP && cond == nil,
			fmt.Errorf("in the cloud: %t, ingress %v, condition %+v, cloud calls %+v", ok, ing, cond, c.Calls())
	})
}

// Which load balancers are Outrigger's must survive a restart: a Service
// provisioned under Outrigger's class changes while Outrigger is down, to
// another class or away from type LoadBalancer (the only ways the API
// server lets a class change). The next Outrigger, which never saw the
// Service as its own, finds its load balancer from the finalizer and the
// cloud and deletes it; the finalizer stays only for another class's owner.
func TestClassChangedWhileDown(t *testing.T) {
	const own = "example.com/outrigger"
	for _, tc := range []struct {
		name string
		// change is what happens to the Service while Outrigger is down.
		change        func(*corev1.Service)
		keepFinalizer bool
	}{
		{name: "to another class", change: func(s *corev1.Service) {
			s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeLoadBalancer, ptr.To("example.com/someone-else")
		}, keepFinalizer: true},
		{name: "to no class", change: func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
		}, keepFinalizer: true},
		{name: "away from LoadBalancer", change: func(*corev1.Service) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testenv.StartCloud(t)
			node(t, "198.18.1.9", nil)
			first := startOutrigger(t, c, "--load-balancer-class="+own)
			ns := namespace(t)
			svc := lbService(ns, "moving", 80)
			svc.Spec.LoadBalancerClass = ptr.To(own)
			create(t, svc)
			provisioned, _ := waitProvisioned(t, c, ns, "moving")
			first.Stop()

			// The class can change only through a type change: away from
			// LoadBalancer (which drops the class), then maybe back.
			update(t, ns, "moving", func(s *corev1.Service) {
				s.Spec.Type, s.Spec.LoadBalancerClass = corev1.ServiceTypeClusterIP, nil
				s.Spec.AllocateLoadBalancerNodePorts, s.Spec.ExternalTrafficPolicy = nil, ""
				for i := range s.Spec.Ports {
					s.Spec.Ports[i].NodePort = 0
				}
			})
			update(t, ns, "moving", tc.change)
			if _, ok := cloudLB(c, provisioned); !ok {
				t.Fatal("the load balancer went away while Outrigger was down")
			}

			startOutrigger(t, c, "--load-balancer-class="+own)
			testenv.Eventually(t, 30*time.Second, "the load balancer made under the old class deleted", func() (bool, error) {
				_, ok := cloudLB(c, provisioned)
				return !ok, nil
			})
			waitEvents(t, "moving", service.EventDeleting, service.EventDeleted)
			if !tc.keepFinalizer {
				// Events name the Service by name only, and the subtests
				// before this one deleted a load balancer of a Service of
				// the same name: wait for the finalizer itself.
				testenv.Eventually(t, 30*time.Second, "the finalizer removed", func() (bool, error) {
					return !slices.Contains(get(t, ns, "moving").Finalizers, service.Finalizer), nil
				})
				return
			}
			if !slices.Contains(get(t, ns, "moving").Finalizers, service.Finalizer) {
				t.Error("finalizer removed; another class's owner was to remove it")
			}
			// The finalizer is the new owner's to remove: here nobody owns
			// the class, so the test lets the Service go itself.
			update(t, ns, "moving", func(s *corev1.Service) {
				s.Finalizers = slices.DeleteFunc(s.Finalizers, func(f string) bool { return f == service.Finalizer })
			})
		})
	}
}

// A Service that vanished while Outrigger was down (its finalizer removed
// by hand), or was recreated under the same name (a new object), leaves a
// load balancer neither the finalizer nor memory knows of: the orphan sweep
// finds it by the cloud's ownership record and deletes it after its grace
// period, with an Event on the namespace. Load balancers of another
// cluster (by name or, at the same name, by identity), of another class,
// without a record or without an identity are never touched.
func TestOrphanSweep(t *testing.T) {
	c := testenv.StartCloud(t)
	node(t, "198.18.8.12", nil)
	sweep := "--load-balancer-orphan-sweep-period=1s"
	first := startOutrigger(t, c, sweep)
	ns := namespace(t)
	create(t, lbService(ns, "vanish", 80))
	create(t, lbService(ns, "again", 80))
	vanished, _ := waitProvisioned(t, c, ns, "vanish")
	old, _ := waitProvisioned(t, c, ns, "again")
	foreign := map[string]map[string]string{
		"a-other-cluster": {"cluster": "another-cluster", "service-uid": "uid-x", "load-balancer-class": "", "service": ns + "/x"},
		"a-other-class":   {"cluster": "kubernetes", "service-uid": "uid-y", "load-balancer-class": "example.com/else", "service": ns + "/y"},
		"a-no-record":     {"service": ns + "/z"},
		// Another cluster left at the same name: its identity differs.
		"a-same-name": {"cluster": "kubernetes", "cluster-id": "another-cluster-uid", "service-uid": "uid-w", "load-balancer-class": "", "service": ns + "/w"},
		// Made before records carried an identity: anyone's.
		"a-no-identity": {"cluster": "kubernetes", "service-uid": "uid-v", "load-balancer-class": "", "service": ns + "/v"},
	}
	for name, tags := range foreign {
		if _, err := c.PutLoadBalancer(name, simcloud.LoadBalancerSpec{Tags: tags}, nil); err != nil {
			t.Fatal(err)
		}
	}
	first.Stop()

	for _, name := range []string{"vanish", "again"} {
		update(t, ns, name, func(s *corev1.Service) { s.Finalizers = nil })
		if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "both Services gone", func() (bool, error) {
		list, err := testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	create(t, lbService(ns, "again", 80))

	startOutrigger(t, c, sweep)
	waitProvisioned(t, c, ns, "again")
	testenv.Eventually(t, 30*time.Second, "the orphaned load balancers deleted", func() (bool, error) {
		_, a := cloudLB(c, vanished)
		_, b := cloudLB(c, old)
		return !a && !b, nil
	})
	waitEvents(t, ns, service.EventOrphanDeleted)
	for name := range foreign {
		if _, ok := c.GetLoadBalancer(name); !ok {
			t.Errorf("load balancer %s, not provably this cluster's and class's, was deleted", name)
		}
	}
	deleteAndWait(t, ns, "again") // while this Outrigger runs
}

// startOnClock runs the controller alone in this process with the sim
// provider on c, watching only Services of namespace ns, its node sync
// windows timed by clk, until the test ends. Call it before
// createNamespace, so that the namespace's Services are deleted while it
// still runs.
func startOnClock(t *testing.T, c *testenv.Cloud, ns string, clk *testclock.Fake) {
	t.Helper()
	cfg, err := os.Open(c.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Close()
	p, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := p.LoadBalancer()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return service.Setup(mgr, service.Options{LoadBalancer: lb, ClusterName: "test", Clock: clk})
	}, func(o *manager.Options) {
		o.Cache = cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Service{}: {Namespaces: map[string]cache.Config{ns: {}}}}}
	})
}

// Nodes joining (tainted uninitialized, no providerID yet) while others
// leave: each load balancer is updated once, when the joining nodes are
// initialized, rather than once for the burst and again for every node
// that gets its providerID. The node sync windows pass on the controller's
// clock, which the test steps.
func TestJoiningNodesMakeOneUpdate(t *testing.T) {
	c := testenv.StartCloud(t)
	var leaving []string
	for i := range 2 {
		leaving = append(leaving, node(t, fmt.Sprintf("198.18.4.%d", i+1), nil))
	}
	staying := node(t, "198.18.4.10", nil)
	clk := testclock.New(time.Now())
	ns := testenv.Name("lb")
	startOnClock(t, c, ns, clk)
	createNamespace(t, ns)
	const services, joins = 3, 4
	var svcs []*corev1.Service
	for i := range services {
		create(t, lbService(ns, fmt.Sprintf("j%d", i), 80))
	}
	for i := range services {
		s, _ := waitProvisioned(t, c, ns, fmt.Sprintf("j%d", i))
		svcs = append(svcs, s)
	}
	c.ResetCalls()

	// The churn: two nodes leave, four join as a kubelet registers them.
	for _, n := range leaving {
		if err := testenv.Client.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var joined []string
	for i := range joins {
		name := testenv.Name("join")
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.4.%d", i+101)}}
		})
		joined = append(joined, name)
	}
	// Their CCM initializes them one by one, more than a node sync window
	// apart: the pace of a cloud slower than the joins. Each time the
	// controller waits on its clock (a window, or the wait for joining
	// nodes) before the clock moves on.
	for _, name := range joined {
		testenv.Eventually(t, 30*time.Second, "the node fan-out waiting on its clock", func() (bool, error) {
			return clk.HasWaiters(), nil
		})
		clk.Step(1500 * time.Millisecond)
		n := testenv.GetNode(t, name)
		n.Spec.ProviderID = "sim://" + name
		n.Spec.Taints = nil
		if _, err := testenv.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := append([]string{staying}, joined...)
	slices.Sort(want)
	testenv.Eventually(t, 60*time.Second, "every load balancer's backends the staying and joined nodes", func() (bool, error) {
		for _, s := range svcs {
			lb, _ := cloudLB(c, s)
			var got []string
			for _, b := range lb.Backends {
				got = append(got, b.Node)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return false, nil
			}
		}
		return true, nil
	})
	if got := c.Calls().ByOp["SetBackends"]; got != services {
		t.Errorf("the churn made %d backend updates for %d load balancers, want one each", got, services)
	}
}
