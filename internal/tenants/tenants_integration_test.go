//go:build integration

package tenants_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/tenants"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// label selects the tests' tenant Secrets.
const label = "example.com/tenant"

// tenant is one tenant cluster of a test: its control plane and its Secret
// in the management cluster (the package's control plane).
type tenant struct {
	name   string
	client kubernetes.Interface
	kc     []byte
	stop   func()
}

func startTenant(t *testing.T, prefix string) *tenant {
	t.Helper()
	cp := testenv.StartSecondControlPlane(t)
	kc, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return &tenant{name: testenv.Name(prefix), client: cp.Client, kc: kc, stop: cp.Stop}
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := testenv.Name("tenants")
	if _, err := testenv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// cloudConfig is a sim cloud-config naming caller in the cloud's call log.
func cloudConfig(cloud *testenv.Cloud, caller string) []byte {
	return fmt.Appendf(nil, "endpoint: %s\nrequestTimeout: 2s\ncaller: %s\n", cloud.URL, caller)
}

func putSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{label: "true"}}, Data: data}
	_, err := testenv.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = testenv.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// flags run Outrigger in tenant mode on ns as replica, with short Leases.
func flags(ns, replica string) []string {
	return []string{"--tenants-namespace=" + ns, "--tenants-selector=" + label, "--tenants-replica-id=" + replica,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=300ms",
		"--controllers=cloud-node-controller,service-lb-controller"}
}

// addNode makes an instance in the cloud and registers its node in the
// tenant's cluster, as a kubelet with --cloud-provider=external does.
func (tn *tenant) addNode(t *testing.T, cloud *testenv.Cloud, ip string) string {
	t.Helper()
	name := testenv.Name(tn.name + "-node")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name, Zone: "zone-a",
		Addresses: []simcloud.Address{{Type: "InternalIP", Address: ip}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.client.CoreV1().Nodes().Create(ctx, kubeletsim.NewNode(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// initialized reports whether the tenant's node has its providerID and no
// longer the uninitialized taint.
func (tn *tenant) initialized(t *testing.T, name string) bool {
	t.Helper()
	n, err := tn.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.ProviderID != "" && !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool {
		return tt.Key == cloudproviderapi.TaintExternalCloudProvider
	})
}

func (tn *tenant) addService(t *testing.T) string {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := tn.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return svc.Name
}

// ingress is the Service's first ingress IP, "" while it has none.
func (tn *tenant) ingress(t *testing.T, name string) (string, *corev1.Service) {
	t.Helper()
	svc, err := tn.client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 {
		return "", svc
	}
	return svc.Status.LoadBalancer.Ingress[0].IP, svc
}

func lease(t *testing.T, ns, tenant string) (*coordinationv1.Lease, bool) {
	t.Helper()
	l, err := testenv.Client.CoordinationV1().Leases(ns).Get(ctx, tenants.LeaseName(tenant), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return l, true
}

func holderOf(t *testing.T, ns, tenant string) string {
	t.Helper()
	l, ok := lease(t, ns, tenant)
	if !ok {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitRounds waits until the replicas' member Leases in ns have been
// renewed n more times in all: rounds of the reconcilers, each of which
// would have acted on what was there before it.
func waitRounds(t *testing.T, ns string, n int) {
	t.Helper()
	renewals := func() map[string]time.Time {
		list, err := testenv.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: tenants.LabelLease + "=member"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]time.Time{}
		for _, l := range list.Items {
			if l.Spec.RenewTime != nil {
				out[l.Name] = l.Spec.RenewTime.Time
			}
		}
		return out
	}
	seen := renewals()
	count := 0
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d rounds of the replicas", n), func() (bool, error) {
		for name, at := range renewals() {
			if at.After(seen[name]) {
				count++
				seen[name] = at
			}
		}
		return count >= n, nil
	})
}

func calledBy(cloud *testenv.Cloud, caller string) int {
	n := 0
	for _, c := range cloud.CallLog() {
		if c.Caller == caller {
			n++
		}
	}
	return n
}

// One Outrigger in tenant mode serves two tenant clusters named by
// Secrets: each tenant's nodes are initialized and its LoadBalancer Service
// gets an ingress IP, each with its own credentials (cloud-config) from its
// Secret. Three bad Secrets (a malformed kubeconfig, an unreachable API
// server, a second Secret naming an already served cluster) each get a
// Warning Event and disturb nothing. A changed Secret restarts its tenant
// with the new content; a removed Secret stops its tenant (its new nodes are
// left alone while the other tenant's are served) and deletes nothing in
// the cloud.
func TestTenantsFromSecrets(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	a, b := startTenant(t, "tenant-a"), startTenant(t, "tenant-b")
	putSecret(t, ns, a.name, map[string][]byte{tenants.KeyKubeconfig: a.kc, tenants.KeyCloudConfig: cloudConfig(cloud, a.name)})
	putSecret(t, ns, b.name, map[string][]byte{tenants.KeyKubeconfig: b.kc, tenants.KeyCloudConfig: cloudConfig(cloud, b.name)})
	malformed, unreachable, duplicate := testenv.Name("malformed"), testenv.Name("unreachable"), b.name+"-dup"
	putSecret(t, ns, malformed, map[string][]byte{tenants.KeyKubeconfig: []byte("apiVersion: v1\nclusters: [not a kubeconfig")})
	putSecret(t, ns, unreachable, map[string][]byte{tenants.KeyKubeconfig: fmt.Appendf(nil,
		"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:%d\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: x\n", testenv.FreePort(t))})

	testenv.StartOutrigger(t, cloud, flags(ns, "replica-1")...)

	nodeA, nodeB := a.addNode(t, cloud, "198.18.10.1"), b.addNode(t, cloud, "198.18.10.2")
	svcA, svcB := a.addService(t), b.addService(t)
	testenv.Eventually(t, 90*time.Second, "both tenants' nodes initialized and Services given an ingress IP", func() (bool, error) {
		ipA, _ := a.ingress(t, svcA)
		ipB, _ := b.ingress(t, svcB)
		return a.initialized(t, nodeA) && b.initialized(t, nodeB) && ipA != "" && ipB != "", nil
	})
	// Each through its own credentials: the caller its cloud-config names.
	if calledBy(cloud, a.name) == 0 || calledBy(cloud, b.name) == 0 {
		t.Errorf("calls by %s: %d, by %s: %d; want each tenant's own cloud-config used", a.name, calledBy(cloud, a.name), b.name, calledBy(cloud, b.name))
	}
	// A second Secret for a cluster already served.
	putSecret(t, ns, duplicate, map[string][]byte{tenants.KeyKubeconfig: b.kc, tenants.KeyCloudConfig: cloudConfig(cloud, duplicate)})
	testenv.Eventually(t, 60*time.Second, "a Warning Event on each bad Secret", func() (bool, error) {
		for secret, reason := range map[string]string{malformed: tenants.ReasonKubeconfigInvalid, unreachable: tenants.ReasonUnreachable, duplicate: tenants.ReasonDuplicate} {
			events := testenv.Events(t, secret)[reason]
			if len(events) == 0 || events[0].Type != corev1.EventTypeWarning {
				return false, fmt.Errorf("no %s Event on %s yet (has %v)", reason, secret, testenv.Events(t, secret))
			}
		}
		return true, nil
	})
	if calledBy(cloud, duplicate) != 0 {
		t.Errorf("the duplicate tenant made %d cloud calls", calledBy(cloud, duplicate))
	}
	// The same, as metrics labelled by tenant.
	testenv.Eventually(t, 10*time.Second, "tenant metrics", func() (bool, error) {
		serving := metricstest.Value(t, "outrigger_tenant_serving", map[string]string{"tenant": a.name}) +
			metricstest.Value(t, "outrigger_tenant_serving", map[string]string{"tenant": b.name})
		failed := metricstest.Value(t, "outrigger_tenant_failures_total", map[string]string{"tenant": malformed, "reason": tenants.ReasonKubeconfigInvalid})
		waiting := metricstest.Value(t, "outrigger_tenant_serving", map[string]string{"tenant": unreachable})
		return serving == 2 && failed >= 1 && waiting == 0, fmt.Errorf("serving %v, failures %v, unreachable serving %v", serving, failed, waiting)
	})
	// Each tenant's cloud calls and node gauges under its own tenant label.
	testenv.Eventually(t, 10*time.Second, "cloud calls and node gauges labelled by tenant", func() (bool, error) {
		callsA, callsB := tenantSeries(t, "outrigger_cloud_calls_total", a.name), tenantSeries(t, "outrigger_cloud_calls_total", b.name)
		nodesA, nodesB := tenantSeries(t, "outrigger_nodes_uninitialized", a.name), tenantSeries(t, "outrigger_nodes_uninitialized", b.name)
		return callsA > 0 && callsB > 0 && nodesA == 1 && nodesB == 1, fmt.Errorf("outrigger_cloud_calls_total series: %d of %s, %d of %s; outrigger_nodes_uninitialized: %d, %d",
			callsA, a.name, callsB, b.name, nodesA, nodesB)
	})

	// A changed Secret restarts its tenant with the new cloud-config: its
	// service controller syncs the Service again, under the new caller.
	putSecret(t, ns, b.name, map[string][]byte{tenants.KeyKubeconfig: b.kc, tenants.KeyCloudConfig: cloudConfig(cloud, b.name+"-rotated")})
	testenv.Eventually(t, 60*time.Second, "tenant B restarted with its new cloud-config", func() (bool, error) {
		return calledBy(cloud, b.name+"-rotated") > 0, nil
	})

	// Removing A's Secret stops A, and only A.
	if err := testenv.Client.CoreV1().Secrets(ns).Delete(ctx, a.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "tenant A's Lease deleted", func() (bool, error) {
		_, ok := lease(t, ns, a.name)
		return !ok, nil
	})
	if len(metricstest.Family(t, "outrigger_tenant_serving").GetMetric()) > 0 && metricstest.Value(t, "outrigger_tenant_serving", map[string]string{"tenant": a.name}) != 0 {
		t.Error("the removed tenant A is still reported serving")
	}
	// No stale series of the removed tenant; B's stay.
	testenv.Eventually(t, 10*time.Second, "tenant A's series gone", func() (bool, error) {
		var left []string
		for _, name := range []string{"outrigger_cloud_calls_total", "outrigger_cloud_family_rate_limit", "outrigger_nodes_uninitialized"} {
			if n := tenantSeries(t, name, a.name); n > 0 {
				left = append(left, fmt.Sprintf("%s (%d)", name, n))
			}
		}
		return len(left) == 0, fmt.Errorf("series of removed tenant %s left: %v", a.name, left)
	})
	if tenantSeries(t, "outrigger_cloud_calls_total", b.name) == 0 {
		t.Errorf("tenant %s's cloud calls went with tenant %s's", b.name, a.name)
	}
	lateA, lateB := a.addNode(t, cloud, "198.18.10.3"), b.addNode(t, cloud, "198.18.10.4")
	testenv.Eventually(t, 60*time.Second, "tenant B's new node initialized", func() (bool, error) {
		return b.initialized(t, lateB), nil
	})
	if a.initialized(t, lateA) {
		t.Error("a node of the removed tenant A was initialized")
	}
	if _, svc := a.ingress(t, svcA); true {
		if _, ok := cloud.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svc)); !ok {
			t.Error("tenant A's load balancer was deleted from the cloud when its Secret was removed")
		}
	}
}

// Two replicas split two tenants through the tenant Leases, one each, and
// serve them; when one stops, the other takes its tenant and serves it;
// when a replica is added, the loaded one releases a tenant to it.
func TestTenantsShardedOverReplicas(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	a, b := startTenant(t, "shard-a"), startTenant(t, "shard-b")
	for _, tn := range []*tenant{a, b} {
		putSecret(t, ns, tn.name, map[string][]byte{tenants.KeyKubeconfig: tn.kc})
	}
	r1 := testenv.StartOutrigger(t, cloud, flags(ns, "r1")...)
	testenv.StartOutrigger(t, cloud, flags(ns, "r2")...)
	nodes := map[*tenant]string{a: a.addNode(t, cloud, "198.18.11.1"), b: b.addNode(t, cloud, "198.18.11.2")}
	split := func(want ...string) func() (bool, error) {
		return func() (bool, error) {
			got := []string{holderOf(t, ns, a.name), holderOf(t, ns, b.name)}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return false, fmt.Errorf("holders %v, want %v", got, want)
			}
			return true, nil
		}
	}
	testenv.Eventually(t, 60*time.Second, "one tenant on each replica", split("r1", "r2"))
	testenv.Eventually(t, 90*time.Second, "both tenants' nodes initialized", func() (bool, error) {
		return a.initialized(t, nodes[a]) && b.initialized(t, nodes[b]), nil
	})

	moved := a
	if holderOf(t, ns, b.name) == "r1" {
		moved = b
	}
	r1.Stop()
	testenv.Eventually(t, 30*time.Second, "r2 holds both tenants", split("r2", "r2"))
	late := moved.addNode(t, cloud, "198.18.11.3")
	testenv.Eventually(t, 60*time.Second, "r1's former tenant served by r2", func() (bool, error) {
		return moved.initialized(t, late), nil
	})

	testenv.StartOutrigger(t, cloud, flags(ns, "r3")...)
	testenv.Eventually(t, 60*time.Second, "r2 released a tenant to the new replica r3", split("r2", "r3"))
	last := map[string]*tenant{holderOf(t, ns, a.name): a, holderOf(t, ns, b.name): b}["r3"]
	node := last.addNode(t, cloud, "198.18.11.4")
	testenv.Eventually(t, 60*time.Second, "r3 serves its tenant", func() (bool, error) {
		return last.initialized(t, node), nil
	})
}

// A replica that died holding tenant Leases (here a "ghost" whose Leases
// are written and never renewed) keeps its tenants from the live replica
// until the Leases expire, and no longer: the live replica then claims and
// serves them.
func TestTenantsOfADeadReplicaTakenWhenTheirLeasesExpire(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	a, b := startTenant(t, "dead-a"), startTenant(t, "dead-b")
	for _, tn := range []*tenant{a, b} {
		putSecret(t, ns, tn.name, map[string][]byte{tenants.KeyKubeconfig: tn.kc})
	}
	const duration = 4
	renewed := metav1.NewMicroTime(time.Now())
	for name, kind := range map[string]string{tenants.LeaseName(a.name): "tenant", "ghost-member": "member"} {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{tenants.LabelLease: kind},
				Annotations: map[string]string{tenants.AnnotationTenant: a.name}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(duration)), RenewTime: &renewed},
		}
		if _, err := testenv.Client.CoordinationV1().Leases(ns).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.StartOutrigger(t, cloud, flags(ns, "live")...)
	nodeA, nodeB := a.addNode(t, cloud, "198.18.12.1"), b.addNode(t, cloud, "198.18.12.2")
	testenv.Eventually(t, 60*time.Second, "the live replica serves the free tenant", func() (bool, error) {
		return holderOf(t, ns, b.name) == "live" && b.initialized(t, nodeB), nil
	})
	if h := holderOf(t, ns, a.name); time.Now().Before(renewed.Add(duration*time.Second)) && h != "ghost" {
		t.Errorf("the dead replica's tenant taken by %q before its Lease expired", h)
	}
	testenv.Eventually(t, 60*time.Second, "the dead replica's tenant served by the live one", func() (bool, error) {
		return holderOf(t, ns, a.name) == "live" && a.initialized(t, nodeA), nil
	})
	l, _ := lease(t, ns, a.name)
	if l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Before(ptr.To(metav1.NewMicroTime(renewed.Add(duration*time.Second)))) {
		t.Errorf("claimed at %v, before the dead replica's Lease expired at %v", l.Spec.AcquireTime, renewed.Add(duration*time.Second))
	}
}

// Two tenants naming one cloud account share its budget (--cloud-qps) in
// turn: together they never exceed it, where each alone would spend it in
// full, and the tenant with three Services is not kept waiting behind the
// one with twelve that asked first.
func TestTenantsOnOneAccountShareItsBudget(t *testing.T) {
	const qps, burst = 5, 1
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	busy, quiet := startTenant(t, "busy"), startTenant(t, "quiet")
	for _, tn := range []*tenant{busy, quiet} {
		putSecret(t, ns, tn.name, map[string][]byte{tenants.KeyKubeconfig: tn.kc,
			tenants.KeyCloudConfig: cloudConfig(cloud, tn.name), tenants.KeyAccount: []byte("account-1")})
	}
	services := func(tn *tenant, n int) []string {
		var out []string
		for i := range n {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("lb-%d", i)},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
			if _, err := tn.client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			out = append(out, svc.Name)
		}
		return out
	}
	provisioned := func(tn *tenant, names []string) int {
		n := 0
		for _, name := range names {
			if ip, _ := tn.ingress(t, name); ip != "" {
				n++
			}
		}
		return n
	}
	busySvcs, quietSvcs := services(busy, 12), services(quiet, 3)
	testenv.StartOutrigger(t, cloud, append(flags(ns, "budget"), "--controllers=service-lb-controller",
		fmt.Sprintf("--cloud-qps=%d", qps), fmt.Sprintf("--cloud-burst=%d", burst))...)

	var busyWhenQuietDone int
	testenv.Eventually(t, 60*time.Second, "the quiet tenant's Services provisioned", func() (bool, error) {
		busyWhenQuietDone = provisioned(busy, busySvcs)
		return provisioned(quiet, quietSvcs) == len(quietSvcs), nil
	})
	if busyWhenQuietDone == len(busySvcs) {
		t.Errorf("the quiet tenant's 3 Services were done only once the busy tenant's 12 were")
	}
	testenv.Eventually(t, 90*time.Second, "the busy tenant's Services provisioned", func() (bool, error) {
		return provisioned(busy, busySvcs) == len(busySvcs), nil
	})
	var starts []time.Time
	for _, c := range cloud.CallLog() {
		if c.Caller == busy.name || c.Caller == quiet.name {
			starts = append(starts, c.Start)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// A token bucket lets burst+qps calls into any second; one more for
	// the network's jitter between the layer and the cloud's clock.
	most := 0
	for i := range starts {
		n := 0
		for j := i; j < len(starts) && starts[j].Sub(starts[i]) < time.Second; j++ {
			n++
		}
		most = max(most, n)
	}
	t.Logf("%d calls of both tenants, at most %d in one second (quiet done with busy at %d/%d)", len(starts), most, busyWhenQuietDone, len(busySvcs))
	if most > qps+burst+1 {
		t.Errorf("%d calls in one second by the two tenants of one account, above its %d/s (burst %d)", most, qps, burst)
	}
}

// Tenants from a directory of kubeconfig files are served as Secrets' are;
// a tenant whose API server goes down while served costs the other
// nothing (its new node is initialized), and a removed file stops its
// tenant.
func TestTenantsFromADirectoryOneGoingDown(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	dir := t.TempDir()
	a, b := startTenant(t, "dir-a"), startTenant(t, "dir-b")
	for _, tn := range []*tenant{a, b} {
		if err := os.WriteFile(filepath.Join(dir, tn.name+".kubeconfig"), tn.kc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testenv.StartOutrigger(t, cloud, "--tenants-namespace="+ns, "--tenants-dir="+dir, "--tenants-replica-id=dir-replica",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=300ms",
		"--controllers=cloud-node-controller")
	nodeA, nodeB := a.addNode(t, cloud, "198.18.14.1"), b.addNode(t, cloud, "198.18.14.2")
	testenv.Eventually(t, 60*time.Second, "both file tenants' nodes initialized", func() (bool, error) {
		return a.initialized(t, nodeA) && b.initialized(t, nodeB), nil
	})
	if holderOf(t, ns, tenants.FileTenantName(a.name+".kubeconfig")) != "dir-replica" {
		t.Errorf("no Lease of file tenant %s held", tenants.FileTenantName(a.name+".kubeconfig"))
	}

	a.stop() // tenant A's API server and etcd go down while it is served
	late := b.addNode(t, cloud, "198.18.14.3")
	testenv.Eventually(t, 30*time.Second, "tenant B's new node initialized while A is down", func() (bool, error) {
		return b.initialized(t, late), nil
	})

	if err := os.Remove(filepath.Join(dir, b.name+".kubeconfig")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "tenant B's Lease deleted with its file", func() (bool, error) {
		_, ok := lease(t, ns, tenants.FileTenantName(b.name+".kubeconfig"))
		return !ok, nil
	})
	after := b.addNode(t, cloud, "198.18.14.4")
	// Evidence of progress before absence: two more rounds of the replica
	// (its member Lease renewed twice) after the node was made.
	waitRounds(t, ns, 2)
	if b.initialized(t, after) {
		t.Error("a node of the removed file tenant was initialized")
	}
}

// tenantSeries counts the series of the metric name labelled tenant.
func tenantSeries(t *testing.T, name, tenant string) int {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					n++
				}
			}
		}
	}
	return n
}
