//go:build integration

package shared

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// clusterUID is the cluster's identity: the UID of its kube-system namespace.
func clusterUID(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// objectsOf is what the cloud holds for one cluster identity: its load
// balancers and routes, each with what must not change under another
// cluster's hands.
func objectsOf(cloud *testenv.Cloud, id string) map[string]string {
	out := map[string]string{}
	for _, lb := range cloud.LoadBalancers() {
		if lb.Tags["cluster-id"] == id {
			out["loadbalancer/"+lb.Name] = fmt.Sprint(lb.VIP, lb.Tags, lb.Listeners, lb.Backends)
		}
	}
	for _, r := range cloud.Routes() {
		if r.Tags["cluster-id"] == id {
			out["route/"+r.Name] = fmt.Sprint(r.Destination, " -> ", r.Target, r.Tags)
		}
	}
	return out
}

// Two clusters left at the default --cluster-name ("kubernetes"), each with
// its own API server and Outrigger, load balance and route on one cloud
// account, with the orphan sweep every second. Neither deletes, changes or
// writes to the other's load balancers or routes: not while both run, not
// when one's node goes, not after both are killed and started again. (An
// Outrigger that took "tagged with my cluster name, Service unknown here"
// as its own orphan deleted every load balancer of the other cluster.)
func TestTwoClustersOfTheSameNameOneCloud(t *testing.T) {
	cloud := testenv.StartCloud(t)
	other := testenv.StartSecondControlPlane(t)
	flags := []string{"--controllers=service-lb-controller,node-route-controller,node-ipam-controller",
		"--allocate-node-cidrs=true", "--configure-cloud-routes=true", "--cluster-cidr=198.18.64.0/18",
		"--route-reconciliation-period=1s", "--load-balancer-orphan-sweep-period=1s"}
	type side struct {
		kubeconfig string
		c          cluster
		id         string
		outriggers []*testenv.Outrigger
		nodes      []string
	}
	ns := testenv.Name("same-name")
	a := &side{kubeconfig: testenv.Kubeconfig, c: cluster{client: testenv.Client, ns: ns}}
	b := &side{kubeconfig: other.Kubeconfig, c: cluster{client: other.Client, ns: ns}}
	sides := []*side{a, b}
	start := func(s *side) {
		s.outriggers = append(s.outriggers, testenv.StartOutrigger(t, cloud, append(slices.Clone(flags), "--kubeconfig="+s.kubeconfig)...))
	}
	for i, s := range sides {
		s.id = clusterUID(t, s.c.client)
		if _, err := s.c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			n := testenv.Name(fmt.Sprintf("n%d", i))
			if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
				t.Fatal(err)
			}
			backendNode(t, s.c.client, n)
			s.nodes = append(s.nodes, n)
		}
		s.c.create(t, "web", nil)
		s.c.create(t, "api", nil)
		start(s)
	}
	if a.id == b.id {
		t.Fatalf("both clusters have identity %s", a.id)
	}
	converged := func(s *side, routes int) bool {
		n := 0
		for _, r := range cloud.Routes() {
			if r.Tags["cluster-id"] == s.id {
				n++
			}
		}
		return n == routes && s.c.provisioned(t, cloud, "web") && s.c.provisioned(t, cloud, "api")
	}
	testenv.Eventually(t, 60*time.Second, "both clusters routed and load balanced", func() (bool, error) {
		return converged(a, len(a.nodes)) && converged(b, len(b.nodes)), nil
	})
	before := map[*side]map[string]string{a: objectsOf(cloud, a.id), b: objectsOf(cloud, b.id)}
	for _, s := range sides {
		if len(before[s]) != 4 {
			t.Fatalf("cluster %s holds %v, want 2 load balancers and 2 routes tagged with its identity", s.id, before[s])
		}
	}
	// sweeps waits until every running Outrigger listed the load balancers
	// (its sweep) and the routes at least n more times: enough for the
	// sweep's grace to pass and a route pass to act on what it saw.
	sweeps := func(what string, n int) {
		t.Helper()
		base := map[string][2]int{}
		for _, s := range sides {
			o := s.outriggers[len(s.outriggers)-1]
			base[o.Caller] = [2]int{callsBy(cloud, o.Caller, "ListLoadBalancers"), callsBy(cloud, o.Caller, "ListRoutes")}
		}
		testenv.Eventually(t, 60*time.Second, what, func() (bool, error) {
			for caller, b := range base {
				if callsBy(cloud, caller, "ListLoadBalancers") < b[0]+n || callsBy(cloud, caller, "ListRoutes") < b[1]+n {
					return false, nil
				}
			}
			return true, nil
		})
	}
	sweeps("three more sweeps and route passes by each Outrigger", 3)

	// A's node goes: A drops its route, B keeps both of its own.
	if err := a.c.client.CoreV1().Nodes().Delete(ctx, a.nodes[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "cluster a dropped the route of its deleted node", func() (bool, error) {
		return len(objectsOf(cloud, a.id)) == 3, nil
	})
	sweeps("three more sweeps and route passes after the node went", 3)

	// Both Outriggers killed and started again: the sweep starts over with
	// no memory of what it made.
	for _, s := range sides {
		s.outriggers[len(s.outriggers)-1].Stop()
		start(s)
	}
	testenv.Eventually(t, 60*time.Second, "both clusters converged after the restart", func() (bool, error) {
		return converged(a, len(a.nodes)-1) && converged(b, len(b.nodes)), nil
	})
	sweeps("three sweeps and route passes by each restarted Outrigger", 3)

	changed, written := 0, 0
	for _, pair := range [][2]*side{{a, b}, {b, a}} {
		mine, theirs := pair[0], pair[1]
		want := before[theirs]
		if theirs == a {
			want = objectsOf(cloud, a.id) // a's own deletion of its node's route
		}
		if got := objectsOf(cloud, theirs.id); !maps.Equal(got, want) {
			changed++
			t.Errorf("cluster %s's objects changed:\n  before %v\n  after  %v", theirs.id, want, got)
		}
		for _, o := range mine.outriggers {
			for obj, n := range writesBy(cloud, o.Caller) {
				if _, isTheirs := before[theirs][obj]; isTheirs {
					written++
					t.Errorf("cluster %s's Outrigger wrote %d times to %s of cluster %s", mine.id, n, obj, theirs.id)
				}
			}
		}
	}
	if got := len(objectsOf(cloud, b.id)); got != 4 {
		t.Errorf("cluster b holds %d objects, want its 2 load balancers and 2 routes", got)
	}
	t.Logf("invariants: two clusters named kubernetes, %d and %d objects; %d changed or deleted by the other, %d written to by the other",
		len(before[a]), len(before[b]), changed, written)
}

// A cluster restored from a backup into a new control plane (its objects
// recreated, so every Service has a new UID, and a new kube-system, so a
// new identity) while the old cluster's load balancers still serve: the
// restored cluster makes its own load balancers and never adopts or
// deletes the old ones, which may still be the old cluster's (a copy made
// for a migration runs beside its original). docs/hybrid.md says why.
func TestRestoredClusterLeavesTheOldLoadBalancers(t *testing.T) {
	cloud := testenv.StartCloud(t)
	restored := testenv.StartSecondControlPlane(t)
	flags := []string{"--controllers=service-lb-controller", "--load-balancer-orphan-sweep-period=1s"}
	ns := testenv.Name("restore")
	oldSide := cluster{client: testenv.Client, ns: ns}
	newSide := cluster{client: restored.Client, ns: ns}
	n := testenv.Name("n")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []cluster{oldSide, newSide} {
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		backendNode(t, c.client, n)
	}
	oldSide.create(t, "web", nil)
	first := testenv.StartOutrigger(t, cloud, append(slices.Clone(flags), "--kubeconfig="+testenv.Kubeconfig)...)
	testenv.Eventually(t, 30*time.Second, "the old cluster's load balancer", func() (bool, error) {
		return oldSide.provisioned(t, cloud, "web"), nil
	})
	oldSvc, _ := oldSide.get(t, "web")
	oldName := cloudprovider.DefaultLoadBalancerName(oldSvc)
	oldLB := lbState(cloud)[oldName]
	first.Stop() // the old cluster's CCM is gone; its load balancer still serves

	newSide.create(t, "web", nil)
	second := testenv.StartOutrigger(t, cloud, append(slices.Clone(flags), "--kubeconfig="+restored.Kubeconfig)...)
	testenv.Eventually(t, 30*time.Second, "the restored cluster's load balancer", func() (bool, error) {
		return newSide.provisioned(t, cloud, "web"), nil
	})
	newSvc, _ := newSide.get(t, "web")
	if newSvc.Status.LoadBalancer.Ingress[0].IP == oldSvc.Status.LoadBalancer.Ingress[0].IP {
		t.Errorf("the restored Service took the old load balancer's address %s", oldSvc.Status.LoadBalancer.Ingress[0].IP)
	}
	lists := callsBy(cloud, second.Caller, "ListLoadBalancers")
	testenv.Eventually(t, 30*time.Second, "three sweeps by the restored cluster's Outrigger", func() (bool, error) {
		return callsBy(cloud, second.Caller, "ListLoadBalancers") >= lists+3, nil
	})
	if got := lbState(cloud)[oldName]; got != oldLB {
		t.Errorf("the old cluster's load balancer changed:\n  before %s\n  after  %s", oldLB, got)
	}
	if w := writesBy(cloud, second.Caller)["loadbalancer/"+oldName]; w != 0 {
		t.Errorf("the restored cluster's Outrigger wrote %d times to the old cluster's load balancer", w)
	}
	newLB, _ := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(newSvc))
	if id := clusterUID(t, restored.Client); newLB.Tags["cluster-id"] != id {
		t.Errorf("the restored cluster's load balancer is tagged %v, want cluster-id %s", newLB.Tags, id)
	}
}

// An Outrigger whose RBAC is the upstream CCM's (no get on namespaces, so
// no cluster identity) runs as the upstream CCM does: it provisions load
// balancers, which carry no identity, and its orphan sweep deletes none of
// them, not even one whose Service is gone.
func TestWithoutTheIdentityRBAC(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := testenv.Name("no-identity")
	c := cluster{client: testenv.Client, ns: ns}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := testenv.Name("n")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: n}); err != nil {
		t.Fatal(err)
	}
	backendNode(t, c.client, n)
	// A user with what the service controller writes and reads, and no
	// namespaces at all.
	user := testenv.Name("ccm-without-namespaces")
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes", "services", "services/status", "events"}, Verbs: []string{"*"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"*"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := c.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.RbacV1().ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{})
		_ = c.client.RbacV1().ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{})
	})
	cfg, err := clientcmd.LoadFromFile(testenv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The refusal is taken as an answer once it has lasted a lease
	// duration: a short one, so that the test does not wait 15s.
	flags := []string{"--controllers=service-lb-controller", "--load-balancer-orphan-sweep-period=1s", "--kubeconfig=" + kubeconfig,
		"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1s", "--leader-elect-retry-period=500ms"}
	first := testenv.StartOutrigger(t, cloud, flags...)

	c.create(t, "kept", nil)
	c.create(t, "gone", nil)
	for _, name := range []string{"kept", "gone"} {
		testenv.Eventually(t, 30*time.Second, name+"'s load balancer", func() (bool, error) {
			return c.provisioned(t, cloud, name), nil
		})
	}
	svc, _ := c.get(t, "gone")
	gone := cloudprovider.DefaultLoadBalancerName(svc)
	if lb, _ := cloud.GetLoadBalancer(gone); lb.Tags["cluster-id"] != "" {
		t.Errorf("without the identity, the load balancer is tagged cluster-id=%q", lb.Tags["cluster-id"])
	}
	// While no CCM runs, the Service goes without its finalizer's cleanup
	// (removed by hand, as a stuck namespace's is): its load balancer is
	// an orphan, which only the sweep could find.
	first.Stop()
	c.update(t, "gone", func(s *corev1.Service) { s.Finalizers = nil })
	if err := c.client.CoreV1().Services(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.StartOutrigger(t, cloud, flags...)
	// The sweep runs every second: three passes later, the orphan is still
	// there, as the upstream CCM would leave it.
	start := sweepsWithoutIdentity(t)
	testenv.Eventually(t, 30*time.Second, "three orphan sweeps", func() (bool, error) {
		return sweepsWithoutIdentity(t) >= start+3, nil
	})
	if _, ok := cloud.GetLoadBalancer(gone); !ok {
		t.Error("the orphan sweep deleted a load balancer without the cluster's identity")
	}
}

// sweepsWithoutIdentity reads outrigger_orphan_sweeps_total{tenant="",result="no_identity"}
// of the Outriggers this process runs.
func sweepsWithoutIdentity(t *testing.T) float64 {
	t.Helper()
	return metricstest.Value(t, "outrigger_orphan_sweeps_total", map[string]string{"tenant": "", "result": "no_identity"})
}
