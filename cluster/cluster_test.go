package cluster

import (
	"net"
	"net/netip"
	"os/exec"
	"slices"

	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
)

// hostSnapshot is what the machine's own namespaces show: the cluster must
// leave all of it as it found it.
func hostSnapshot(t *testing.T) map[string]string {
	t.Helper()
	snap := map[string]string{}
	for name, args := range map[string][]string{
		"links":   {"ip", "-o", "link", "show"},
		"addrs":   {"ip", "-o", "addr", "show"},
		"routes":  {"ip", "route", "show", "table", "all"},
		"netns":   {"ip", "netns", "list"},
		"sysctls": {"sysctl", "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops", "net.netfilter.nf_conntrack_max"},
	} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		snap[name] = string(out)
	}
	// iptables-save, without its timestamps and counters.
	if out, err := exec.Command("iptables-save").Output(); err == nil {
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ":") {
				lines = append(lines, l)
			}
		}
		snap["iptables"] = strings.Join(lines, "\n")
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var ours []string
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, defaultWork) || strings.Contains(l, " /run/netns ") {
			ours = append(ours, l)
		}
	}
	snap["mounts"] = strings.Join(ours, "\n")
	return snap
}

// TestRealCluster starts two real nodes, has Outrigger initialize them,
// runs agnhost serve-hostname on both behind a type: LoadBalancer Service,
// reaches both pods through the VIP Outrigger serves, and checks that
// stopping the cluster leaves the machine as it was.
func TestRealCluster(t *testing.T) {
	withCluster(t, false, func(ctx context.Context, c *Cluster) {
		realCluster(ctx, t, c)
	})
}

// withCluster starts a cluster (hybrid or not), runs body on it, stops it,
// and checks that the machine is as it was before.
func withCluster(t *testing.T, hybrid bool, body func(context.Context, *Cluster)) {
	t.Helper()
	if os.Getenv("OUTRIGGER_CLUSTER") == "" {
		t.Skip("the real-cluster test runs with OUTRIGGER_CLUSTER=1 (as root, after 'make cluster-binaries cluster-images image'; 'make cluster-test' does all that)")
	}
	root, _ := filepath.Abs("..")
	assets := apiserver.AssetsDir()
	o := Options{
		OutriggerImage: filepath.Join(root, "bin", "outrigger-image.tar"),
		Out:            testWriter{t},
		Hybrid:         hybrid,
	}
	for _, img := range ClusterImages {
		o.Images = append(o.Images, filepath.Join(assets, "images", img))
	}
	// Asked for by OUTRIGGER_CLUSTER=1 (make cluster-test builds all of
	// it first): what is missing is a failure, not a reason to skip.
	if err := Preflight(o); err != nil {
		t.Fatalf("cannot run a real cluster here: %v", err)
	}
	for _, img := range o.Images {
		if _, err := os.Stat(img); err != nil {
			t.Fatalf("image %s is not built: run 'make cluster-images'", img)
		}
	}
	if err := EnsurePackages(context.Background(), testWriter{t}); err != nil {
		t.Fatal(err)
	}
	// A killed earlier run is cleaned up by Up; take the snapshot after,
	// unless a cluster is running (it would be torn down under its user).
	release, err := Lock(defaultWork)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if old, err := LoadState(defaultWork); err != nil {
		t.Fatal(err)
	} else if err := Cleanup(old, testWriter{t}); err != nil {
		t.Fatal(err)
	}
	before := hostSnapshot(t)
	// envtest logs through controller-runtime, which prints a warning
	// with a stack trace when that happens without a logger, 30s into
	// the process (the second cluster's start).
	ctrllog.SetLogger(logr.Discard())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Up(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	defer func() {
		if !downed {
			_ = c.Down()
		}
	}()

	body(ctx, c)

	downed = true
	if err := c.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	after := hostSnapshot(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("host %s changed:\nbefore:\n%s\nafter:\n%s", k, v, after[k])
		}
	}
	for _, p := range []string{defaultWork, StatePath(defaultWork)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left behind", p)
		}
	}
	if roots, err := cgroupHierarchies(); err == nil {
		for _, r := range roots {
			if _, err := os.Stat(filepath.Join(r, c.state.CgroupBase)); err == nil {
				t.Errorf("cgroup %s left behind in %s", c.state.CgroupBase, r)
			}
		}
	}
	for _, d := range c.state.CgroupDirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s (made by the harness) left behind", d)
		}
	}
	if n := len(cgroupProcs(filepath.Join(pidsHierarchy(), c.state.CgroupBase))); n > 0 {
		t.Errorf("%d processes left behind", n)
	}
}

// realCluster is TestRealCluster's part on the running cluster.
func realCluster(ctx context.Context, t *testing.T, c *Cluster) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("got %d nodes, want 2", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		if n.Spec.ProviderID != "local://"+n.Name {
			t.Errorf("node %s: providerID %q, want local://%s (set by Outrigger)", n.Name, n.Spec.ProviderID, n.Name)
		}
		if hasUninitializedTaint(&n) {
			t.Errorf("node %s still has the uninitialized taint", n.Name)
		}
		if !strings.HasPrefix(n.Spec.PodCIDR, "198.18.") {
			t.Errorf("node %s: pod CIDR %q outside 198.18.0.0/15", n.Name, n.Spec.PodCIDR)
		}
	}

	labels := map[string]string{"app": "hostnames"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnames", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// One pod per node.
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name: "agnhost", Image: "outrigger.local/agnhost:" + apiserver.KubernetesVersion,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"serve-hostname"},
						Ports:           []corev1.ContainerPort{{ContainerPort: 9376}},
					}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnames", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}},
		},
	}
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]string{} // pod name -> node
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hostnames"})
		if err != nil {
			return false, nil
		}
		clear(pods)
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				pods[p.Name] = p.Spec.NodeName
			}
		}
		return len(pods) == 2, c.anyExited()
	}); err != nil {
		t.Fatalf("pods running: %v (have %v)", err, pods)
	}
	onNodes := map[string]bool{}
	for _, n := range pods {
		onNodes[n] = true
	}
	if len(onNodes) != 2 {
		t.Fatalf("pods %v are not on two nodes", pods)
	}

	var vip string
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Services("default").Get(ctx, "hostnames", metav1.GetOptions{})
		if err == nil && len(got.Status.LoadBalancer.Ingress) > 0 {
			vip = got.Status.LoadBalancer.Ingress[0].IP
		}
		return vip != "", nil
	}); err != nil {
		t.Fatalf("Outrigger gave the Service no load balancer: %v", err)
	}
	if !strings.HasPrefix(vip, "198.18.100.") {
		t.Errorf("VIP %s is not from the pool %s", vip, VIPPool)
	}
	// Every pod answers through the VIP, from the harness namespace: the
	// local provider's proxy, a node's NodePort, kube-proxy, CNI, the pod.
	hc := HarnessHTTPClient()
	seen := map[string]bool{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get("http://" + vip + "/")
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if _, ok := pods[string(body)]; ok {
			seen[string(body)] = true
		}
		return len(seen) == 2, nil
	}); err != nil {
		t.Fatalf("through VIP %s saw %v, want both pods %v: %v", vip, seen, pods, err)
	}

	checkFlowsStayOnOneNode(ctx, t, c, vip)
	checkClusterDNS(ctx, t, c, "hostnames")

	// The API server reaches the kubelets (logs, through the egress
	// proxy), as kubectl logs and exec need.
	for name := range pods {
		if _, err := c.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx); err != nil {
			t.Errorf("logs of pod %s: %v", name, err)
		}
		break
	}

	checkOutriggerDeployed(ctx, t, c)
	checkLocalTrafficKeepsClientIP(ctx, t, c)
	checkNodeLifecycle(ctx, t, c)
	checkLeaderHandOver(ctx, t, c)
}

// checkOutriggerDeployed asserts Outrigger runs as users run it: the
// Deployment of deploy/ from its image, both replicas ready, one of them
// holding the upstream lease name, under its ServiceAccount.
func checkOutriggerDeployed(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	d, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != OutriggerImage {
		t.Errorf("Deployment image %s, want %s", got, OutriggerImage)
	}
	if d.Status.ReadyReplicas != 2 {
		t.Errorf("%d ready replicas, want 2", d.Status.ReadyReplicas)
	}
	if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "cloud-controller-manager" {
		t.Errorf("runs as ServiceAccount %q", sa)
	}
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=outrigger"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := c.Client.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the leader election lease: %v", err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	leader := false
	for _, p := range pods.Items {
		leader = leader || strings.HasPrefix(holder, p.Name+"_")
	}
	if !leader {
		t.Errorf("lease holder %q is none of the Outrigger pods", holder)
	}
}

// checkLocalTrafficKeepsClientIP runs agnhost netexec on one node behind a
// Service with externalTrafficPolicy: Local: only that node may hold the
// VIP, /clientip shows the client's address, ExternalClientIP (no SNAT on
// the way), and
// deleting the Service withdraws the VIP.
func checkLocalTrafficKeepsClientIP(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	target := c.Nodes()[1]
	labels := map[string]string{"app": "clientip"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "clientip", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": target},
					Containers: []corev1.Container{{
						Name: "agnhost", Image: "outrigger.local/agnhost:" + apiserver.KubernetesVersion,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"netexec", "--http-port=8080"},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)},
						}},
					}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "clientip", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              labels,
			Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var vip string
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Services("default").Get(ctx, "clientip", metav1.GetOptions{})
		if err == nil && len(got.Status.LoadBalancer.Ingress) > 0 {
			vip = got.Status.LoadBalancer.Ingress[0].IP
			if m := got.Status.LoadBalancer.Ingress[0].IPMode; m == nil || *m != corev1.LoadBalancerIPModeVIP {
				t.Errorf("ingress ipMode %v, want VIP (kube-proxy on the node serves the VIP)", m)
			}
		}
		return vip != "", nil
	}); err != nil {
		t.Fatalf("no load balancer for the Local Service: %v", err)
	}
	hc := HarnessHTTPClient()
	var client string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get("http://" + vip + "/clientip")
		if err != nil {
			return false, nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		client = string(body)
		return resp.StatusCode == 200, nil
	}); err != nil {
		t.Fatalf("GET %s/clientip: %v", vip, err)
	}
	if host, _, err := net.SplitHostPort(client); err != nil || host != ExternalClientIP {
		t.Errorf("/clientip = %q, want the client's address %s kept (externalTrafficPolicy: Local)", client, ExternalClientIP)
	}
	// The cloud's router forwards the VIP to the node with the endpoint
	// only: the others fail the Service's health check node port.
	routed := func() []string { return c.Routes()[netip.MustParseAddr(vip)] }
	if got, want := routed(), []string{c.NodeIP(target)}; !slices.Equal(got, want) {
		t.Errorf("VIP %s is routed to %v, want only %v (the node with the endpoint)", vip, got, want)
	}

	if err := c.Client.CoreV1().Services("default").Delete(ctx, "clientip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Services("default").Get(ctx, "clientip", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && routed() == nil, nil
	}); err != nil {
		t.Fatalf("after deleting the Service, VIP %s is still routed to %v (or the Service's finalizer stays): %v", vip, routed(), err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get("http://" + vip + "/clientip")
		if err == nil {
			resp.Body.Close()
		}
		return err != nil, nil
	}); err != nil {
		t.Errorf("VIP %s still answers a minute after its Service was deleted", vip)
	}
}

// checkNodeLifecycle powers a node's machine off (kubelet stopped, pods
// killed) and expects Outrigger's lifecycle controller to taint the node
// shut down once it is NotReady; deletes the machine and expects the Node
// deleted; starts it again (in a hybrid cluster a new sim instance) and
// expects the kubelet's new Node initialized with its machine's providerID.
func checkNodeLifecycle(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	name := c.Nodes()[1]
	const shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
	hasTaint := func(n *corev1.Node, key string) bool {
		for _, tn := range n.Spec.Taints {
			if tn.Key == key {
				return true
			}
		}
		return false
	}
	if err := InstanceAction(ctx, c.opts.WorkDir, "stop", name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && hasTaint(n, shutdownTaint), nil
	}); err != nil {
		t.Fatalf("stopped machine: node %s never got the %s taint: %v", name, shutdownTaint, err)
	}
	if err := InstanceAction(ctx, c.opts.WorkDir, "delete", name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("deleted machine: node %s not deleted: %v", name, err)
	}
	other, err := c.Client.CoreV1().Nodes().Get(ctx, c.Nodes()[0], metav1.GetOptions{})
	if err != nil || other.DeletionTimestamp != nil {
		t.Fatalf("the running node %s must stay: %v", c.Nodes()[0], err)
	}
	if err := InstanceAction(ctx, c.opts.WorkDir, "start", name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID == c.ProviderID(name) && !hasUninitializedTaint(n) && !hasTaint(n, shutdownTaint), nil
	}); err != nil {
		t.Fatalf("restarted machine: node %s not registered and initialized again: %v", name, err)
	}
}

// checkLeaderHandOver deletes the leading Outrigger pod (SIGTERM, as a
// rollout or a drain does) and expects another pod to take the Lease, and
// the new leader to act: a new LoadBalancer Service gets its VIP.
func checkLeaderHandOver(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	leases := c.Client.CoordinationV1().Leases("kube-system")
	holder := func() string {
		l, err := leases.Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		h, _, _ := strings.Cut(ptr.Deref(l.Spec.HolderIdentity, ""), "_")
		return h
	}
	leader := holder()
	if leader == "" {
		t.Fatal("no Outrigger replica holds the lease")
	}
	start := time.Now()
	if err := c.Client.CoreV1().Pods("kube-system").Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var next string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		next = holder()
		return next != "" && next != leader, nil
	}); err != nil {
		t.Fatalf("after deleting the leader %s, no other replica took the lease: %v", leader, err)
	}
	t.Logf("leader %s deleted; %s leads after %s", leader, next, time.Since(start).Round(100*time.Millisecond))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "after-handover", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "hostnames"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}},
		},
	}
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil && len(got.Status.LoadBalancer.Ingress) > 0, nil
	}); err != nil {
		t.Fatalf("the new leader gave a new Service no load balancer: %v", err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkClusterDNS asks CoreDNS (its pod, from the harness namespace) for
// the Service's name: the answer is its ClusterIP, from the API server.
// The kube-dns Service's address is every pod's nameserver (the kubelets'
// clusterDNS); upstream's e2e tests (make e2e-upstream) use it from pods.
func checkClusterDNS(ctx context.Context, t *testing.T, c *Cluster, service string) {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("CoreDNS pod: %v (%d pods)", err, len(pods.Items))
	}
	dnsAddr := net.JoinHostPort(pods.Items[0].Status.PodIP, "53")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialInNetns(ctx, "/var/run/netns/"+harnessNS, network, dnsAddr)
	}}
	svc, err := c.Client.CoreV1().Services("default").Get(ctx, service, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := service + ".default.svc.cluster.local"
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(lctx, name)
	if err != nil || len(addrs) != 1 || addrs[0] != svc.Spec.ClusterIP {
		t.Errorf("CoreDNS at %s: %s = %v (%v), want [%s]", dnsAddr, name, addrs, err, svc.Spec.ClusterIP)
	}
	dns, err := c.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dns.Spec.ClusterIP != ClusterDNSIP {
		t.Errorf("kube-dns Service has ClusterIP %q, want %s (the kubelets' clusterDNS)", dns.Spec.ClusterIP, ClusterDNSIP)
	}
}
