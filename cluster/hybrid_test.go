package cluster

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// TestHybridCluster runs the cluster with its two nodes on two platforms:
// orc-node1 the local cloud's machine, orc-node2 a sim cloud instance, one
// Outrigger (--cloud-providers-file) serving both. Each node is initialized
// by its own provider; a LoadBalancer Service per provider (no class: local;
// example.com/sim: sim) answers real HTTP traffic through its VIP from the
// pod on its own provider's node only; the sim load balancer lists only
// orc-node2; and the sim node's lifecycle (stop, delete, start) goes through
// the sim cloud.
func TestHybridCluster(t *testing.T) {
	withCluster(t, true, func(ctx context.Context, c *Cluster) {
		hybridCluster(ctx, t, c)
	})
}

func hybridCluster(ctx context.Context, t *testing.T, c *Cluster) {
	localNode, simNode := c.Nodes()[0], c.Nodes()[1]
	if c.Platform(localNode) != PlatformLocal || c.Platform(simNode) != PlatformSim {
		t.Fatalf("platforms %s=%q %s=%q, want local and sim", localNode, c.Platform(localNode), simNode, c.Platform(simNode))
	}
	simID := strings.TrimPrefix(c.ProviderID(simNode), "sim://")
	instance, ok := c.sim.Get(simID)
	if !ok {
		t.Fatalf("%s has no sim instance (providerID %q)", simNode, c.ProviderID(simNode))
	}

	// Each node initialized by its own provider: its providerID, and
	// what that provider alone sets (the local provider's instance type;
	// the sim instance's type and zone), with the node's real address.
	want := map[string]map[string]string{
		localNode: {"node.kubernetes.io/instance-type": "local"},
		simNode:   {"node.kubernetes.io/instance-type": instance.Type, "topology.kubernetes.io/zone": instance.Zone, "topology.kubernetes.io/region": instance.Region},
	}
	for name, labels := range want {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.ProviderID != c.ProviderID(name) || !strings.HasPrefix(n.Spec.ProviderID, c.Platform(name)+"://") {
			t.Errorf("node %s: providerID %q, want %q", name, n.Spec.ProviderID, c.ProviderID(name))
		}
		if hasUninitializedTaint(n) {
			t.Errorf("node %s still has the uninitialized taint", name)
		}
		for k, v := range labels {
			if n.Labels[k] != v {
				t.Errorf("node %s: label %s=%q, want %q (set by its provider)", name, k, n.Labels[k], v)
			}
		}
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if !slices.Equal(internal, []string{c.NodeIP(name)}) {
			t.Errorf("node %s: InternalIPs %v, want [%s]", name, internal, c.NodeIP(name))
		}
	}

	// agnhost netexec on each node; one Service per provider, both
	// externalTrafficPolicy: Local.
	labels := map[string]string{"app": "hybrid"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hybrid", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
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
	services := map[string]*string{"hybrid-local": nil, "hybrid-sim": ptr.To(SimLoadBalancerClass)}
	for name, class := range services {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{
				Type:                  corev1.ServiceTypeLoadBalancer,
				LoadBalancerClass:     class,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
				Selector:              labels,
				Ports:                 []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if _, err := c.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOn := map[string]string{} // node -> its pod
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hybrid"})
		if err != nil {
			return false, nil
		}
		clear(podOn)
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				podOn[p.Spec.NodeName] = p.Name
			}
		}
		return podOn[localNode] != "" && podOn[simNode] != "", c.anyExited()
	}); err != nil {
		t.Fatalf("a running pod on each node: %v (have %v)", err, podOn)
	}

	vips := map[string]string{}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for name := range services {
			got, err := c.Client.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && len(got.Status.LoadBalancer.Ingress) > 0 {
				vips[name] = got.Status.LoadBalancer.Ingress[0].IP
			}
		}
		return len(vips) == len(services), nil
	}); err != nil {
		t.Fatalf("load balancers of the two Services: %v (have %v)", err, vips)
	}
	for name, pool := range map[string]string{"hybrid-local": VIPPool, "hybrid-sim": SimVIPPool} {
		if vip, err := netip.ParseAddr(vips[name]); err != nil || !netip.MustParsePrefix(pool).Contains(vip) {
			t.Errorf("Service %s: VIP %s, want one from %s (its provider's pool)", name, vips[name], pool)
		}
	}

	// The sim cloud made one load balancer, for the sim Service, with only
	// the sim node behind it.
	lbs := c.SimLoadBalancers()
	if len(lbs) != 1 || lbs[0].VIP != vips["hybrid-sim"] {
		t.Fatalf("sim load balancers %+v, want one with VIP %s", lbs, vips["hybrid-sim"])
	}
	if want := []simcloud.Backend{{Node: simNode, Address: c.NodeIP(simNode)}}; !slices.Equal(lbs[0].Backends, want) {
		t.Errorf("sim load balancer backends %v, want only %v", lbs[0].Backends, want)
	}

	// Each VIP answers from the harness namespace, from the pod on its
	// provider's node, every time.
	hc := HarnessHTTPClient()
	get := func(url string) (string, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("%s: %s", url, resp.Status)
		}
		return string(body), err
	}
	for name, node := range map[string]string{"hybrid-local": localNode, "hybrid-sim": simNode} {
		url := "http://" + vips[name] + "/hostname"
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			_, err := get(url)
			return err == nil, nil
		}); err != nil {
			t.Fatalf("Service %s: GET %s: %v", name, url, err)
		}
		for range 10 {
			got, err := get(url)
			if err != nil || got != podOn[node] {
				t.Errorf("Service %s: GET %s = %q (%v), want the pod on %s, %s", name, url, got, err, node, podOn[node])
			}
		}
		if got := c.Routes()[netip.MustParseAddr(vips[name])]; !slices.Equal(got, []string{c.NodeIP(node)}) {
			t.Errorf("Service %s: VIP %s routed to %v, want only %s (%s)", name, vips[name], got, c.NodeIP(node), node)
		}
	}

	// The sim node's machine is the sim cloud's: the local cloud's instance
	// API does not know it, and stopping, deleting and starting it go
	// through the sim cloud (a new instance, a new providerID).
	if got := localInstanceStatus(t, simNode); got != 404 {
		t.Errorf("the local instance API answers %d for the sim node %s, want 404", got, simNode)
	}
	checkNodeLifecycle(ctx, t, c)
	if id := strings.TrimPrefix(c.ProviderID(simNode), "sim://"); id == simID {
		t.Errorf("the started sim node kept its deleted instance's ID %s", id)
	}
	if in, _ := c.sim.Get(simID); in.State != simcloud.StateTerminated {
		t.Errorf("the deleted sim instance %s is %q, want %q", simID, in.State, simcloud.StateTerminated)
	}
}

// localInstanceStatus is the local cloud's instance API's status code for
// the named machine, asked from the harness namespace as Outrigger asks it.
func localInstanceStatus(t *testing.T, name string) int {
	t.Helper()
	resp, err := HarnessHTTPClient().Get(fmt.Sprintf("http://%s:%d/instances/%s", BridgeIP, InstancesPort, name))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
