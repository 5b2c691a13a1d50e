package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/testobj"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// kubeletNodes returns n Nodes as kubelets and controllers leave them in a
// cloud cluster: 14 labels, 3 annotations, managedFields, 4 conditions,
// 3 addresses, node info, capacity, and the 50 container images a kubelet
// reports (each with its digest and tag). Every node has its own name,
// providerID and addresses; what every node of a cluster has alike (the
// images of its DaemonSets, managedFields) is shared, so that 50,000 of
// them fit in a test's memory.
func kubeletNodes(n int) []*corev1.Node {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	images := make([]corev1.ContainerImage, 50)
	for j := range images {
		repo := fmt.Sprintf("registry.example.com/team-%d/service-%d", j%7, j)
		images[j] = corev1.ContainerImage{Names: []string{fmt.Sprintf("%s@sha256:%064x", repo, j*7919), fmt.Sprintf("%s:v1.%d.0", repo, j)},
			SizeBytes: int64(50_000_000 + j*1_000_000)}
	}
	managed := []metav1.ManagedFieldsEntry{
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"DiskPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"MemoryPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"PIDPressure\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}},"k:{\"type\":\"Ready\"}":{"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:containerRuntimeVersion":{},"f:kernelVersion":{},"f:kubeletVersion":{},"f:machineID":{},"f:operatingSystem":{},"f:osImage":{},"f:systemUUID":{}}}}`)},
		{Manager: "outrigger", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:node.kubernetes.io/instance-type":{},"f:topology.kubernetes.io/region":{},"f:topology.kubernetes.io/zone":{}}},"f:spec":{"f:providerID":{}}}`)},
	}
	resources := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32386520Ki"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki")}
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	conditions := []corev1.NodeCondition{
		condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		ip := fmt.Sprintf("198.18.%d.%d", i>>8&255, i&255)
		name := fmt.Sprintf("node-%05d.compute.internal", i)
		nodes[i] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, UID: types.UID(fmt.Sprintf("3f2a6c1e-0000-4000-8000-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: now,
				Labels: map[string]string{
					"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
					"kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": "m6i.2xlarge", "beta.kubernetes.io/instance-type": "m6i.2xlarge",
					"topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": fmt.Sprintf("region-1%c", 'a'+i%3),
					"failure-domain.beta.kubernetes.io/region": "region-1", "failure-domain.beta.kubernetes.io/zone": fmt.Sprintf("region-1%c", 'a'+i%3),
					"example.com/nodegroup": "general-purpose", "example.com/capacity-type": "on-demand", "example.com/zone-id": fmt.Sprintf("r1-az%d", i%3),
				},
				Annotations: map[string]string{
					"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
					"csi.volume.kubernetes.io/nodeid": fmt.Sprintf(`{"block.csi.example.com":"i-%017x"}`, i),
				},
				ManagedFields: managed,
			},
			Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("example:///region-1a/i-%017x", i), PodCIDR: "198.19.0.0/24", PodCIDRs: []string{"198.19.0.0/24"}},
			Status: corev1.NodeStatus{
				Capacity: resources, Allocatable: resources, Conditions: conditions,
				Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalDNS, Address: name}},
				DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
				NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2c0ffe-0000-0000-0000-%012x", i), BootID: "6f1b2c3d-0000-4000-8000-000000000000",
					KernelVersion: "6.1.0-1.x86_64", OSImage: "Linux 2026", ContainerRuntimeVersion: "containerd://2.1.0", KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
				Images: images,
			},
		}
	}
	return nodes
}

// backends is a load balancer provider that keeps the nodes of its last
// EnsureLoadBalancer and UpdateLoadBalancer.
type backends struct {
	fakecloud.Cloud
	mu              sync.Mutex
	ensured, update []*corev1.Node
}

func (b *backends) ProviderName() string                             { return "backends" }
func (b *backends) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return b, true }
func (b *backends) GetLoadBalancer(context.Context, string, *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}
func (b *backends) GetLoadBalancerName(_ context.Context, _ string, s *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(s)
}
func (b *backends) EnsureLoadBalancer(_ context.Context, _ string, _ *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ensured = nodes
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.255.1"}}}, nil
}
func (b *backends) UpdateLoadBalancer(_ context.Context, _ string, _ *corev1.Service, nodes []*corev1.Node) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update = nodes
	return nil
}
func (b *backends) EnsureLoadBalancerDeleted(context.Context, string, *corev1.Service) error {
	return nil
}

// largest records the largest message the server received: gRPC's own
// accounting of each inbound payload.
type largest struct {
	mu    sync.Mutex
	bytes int
}

func (l *largest) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (l *largest) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (l *largest) HandleConn(context.Context, stats.ConnStats)                       {}
func (l *largest) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		l.mu.Lock()
		l.bytes = max(l.bytes, in.Length)
		l.mu.Unlock()
	}
}
func (l *largest) get() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// withoutStreams is a plugin of before LOAD_BALANCER_STREAM: it does not
// report it, so Outrigger sends each request in one message.
type withoutStreams struct{ pluginpb.CloudProviderServer }

func (w withoutStreams) GetCapabilities(ctx context.Context, req *pluginpb.GetCapabilitiesRequest) (*pluginpb.GetCapabilitiesResponse, error) {
	resp, err := w.CloudProviderServer.GetCapabilities(ctx, req)
	if err == nil {
		resp.Capabilities = slices.DeleteFunc(resp.Capabilities, func(c pluginpb.Capability) bool { return c == pluginpb.Capability_LOAD_BALANCER_STREAM })
	}
	return resp, err
}

// serveSized serves p on a unix socket with gRPC's default message limits
// (4 MiB received), recording the largest message received.
func serveSized(t *testing.T, p cloudprovider.Interface, streams bool) (cloudprovider.LoadBalancer, *largest) {
	t.Helper()
	endpoint, _ := socket(t)
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := &largest{}
	srv := grpc.NewServer(grpc.StatsHandler(size))
	svc := plugin.NewServer(p, plugin.Info{})
	if !streams {
		svc = withoutStreams{svc}
	}
	pluginpb.RegisterCloudProviderServer(srv, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { srv.Stop(); <-served })
	lb, ok := dial(t, endpoint).LoadBalancer()
	if !ok {
		t.Fatal("the plugin offers no load balancers")
	}
	return lb, size
}

func lbService() *corev1.Service {
	return testobj.LBService("default", "web", testobj.UID("0b0e7a6c-0000-4000-8000-000000000001"), testobj.NodePort(80, 30080))
}

// checkBackends says how the nodes a provider got differ from those sent:
// all of them, in order, with their providerIDs, addresses and labels, and
// without what a plugin does not receive (images, managedFields).
func checkBackends(got, sent []*corev1.Node) error {
	if len(got) != len(sent) {
		return fmt.Errorf("the provider got %d nodes of %d", len(got), len(sent))
	}
	for i, n := range got {
		want := sent[i]
		switch {
		case n.Name != want.Name || n.Spec.ProviderID != want.Spec.ProviderID:
			return fmt.Errorf("node %d: got %s (%s), want %s (%s)", i, n.Name, n.Spec.ProviderID, want.Name, want.Spec.ProviderID)
		case !slices.Equal(n.Status.Addresses, want.Status.Addresses):
			return fmt.Errorf("node %s: addresses %v, want %v", n.Name, n.Status.Addresses, want.Status.Addresses)
		case n.Labels[corev1.LabelTopologyZone] != want.Labels[corev1.LabelTopologyZone] || len(n.Labels) != len(want.Labels):
			return fmt.Errorf("node %s: labels %v, want %v", n.Name, n.Labels, want.Labels)
		case len(n.Status.Images) > 0 || len(n.ManagedFields) > 0:
			return fmt.Errorf("node %s: %d images and %d managedFields crossed the boundary, want none", n.Name, len(n.Status.Images), len(n.ManagedFields))
		}
	}
	return nil
}

// Load balancers with thousands of backends cross the boundary in
// messages a gRPC server with default limits accepts: the provider gets
// every node with its providerID and addresses, on EnsureLoadBalancer and
// UpdateLoadBalancer. (Each backend's whole Node JSON in one message once
// passed gRPC's 4 MiB at a few hundred nodes, and the refusal read as
// throttling: such load balancers never converged.)
func TestLoadBalancerBackendsAtScale(t *testing.T) {
	sizes := []int{5_000}
	switch {
	case testing.Short():
	case raceDetector:
		// 50 s there, 4 s without. 50,000 such nodes are 136 MB of JSON,
		// in 44 messages of at most MessageBudget.
		t.Log("50,000 backends: run without -race")
	default:
		sizes = append(sizes, 50_000)
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			p := &backends{}
			lb, size := serveSized(t, p, true)
			nodes := kubeletNodes(n)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // bounds a failing test only
			defer cancel()
			st, err := lb.EnsureLoadBalancer(ctx, "cluster", lbService(), nodes)
			if err != nil {
				t.Fatalf("EnsureLoadBalancer with %d backends: %v", n, err)
			}
			if len(st.Ingress) != 1 {
				t.Errorf("status %v, want the provider's ingress", st)
			}
			// Update with every other node gone: the provider gets exactly the rest.
			rest := nodes[:n/2]
			if err := lb.UpdateLoadBalancer(ctx, "cluster", lbService(), rest); err != nil {
				t.Fatalf("UpdateLoadBalancer with %d backends: %v", len(rest), err)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if err := checkBackends(p.ensured, nodes); err != nil {
				t.Errorf("EnsureLoadBalancer: %v", err)
			}
			if err := checkBackends(p.update, rest); err != nil {
				t.Errorf("UpdateLoadBalancer: %v", err)
			}
			if got := size.get(); got > plugin.MessageBudget {
				t.Errorf("the plugin received a message of %d bytes, over the budget of %d", got, plugin.MessageBudget)
			}
			t.Logf("%d backends: largest message %d bytes", n, size.get())
		})
	}
}

// A plugin without LOAD_BALANCER_STREAM gets each request in one message:
// it takes a thousand kubelet nodes under gRPC's default 4 MiB, and past
// that the refusal is an error that says what is wrong, not a throttle
// (which would retry the Service after a hint, forever).
func TestLoadBalancerTooLargeForAPluginIsNotThrottling(t *testing.T) {
	p := &backends{}
	lb, _ := serveSized(t, p, false)
	nodes := kubeletNodes(5_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	if _, err := lb.EnsureLoadBalancer(ctx, "cluster", lbService(), nodes[:1_000]); err != nil {
		t.Fatalf("EnsureLoadBalancer with 1,000 backends in one message: %v", err)
	}
	p.mu.Lock()
	if err := checkBackends(p.ensured, nodes[:1_000]); err != nil {
		t.Error(err)
	}
	p.mu.Unlock()

	for name, call := range map[string]func() error{
		"EnsureLoadBalancer": func() error { _, err := lb.EnsureLoadBalancer(ctx, "cluster", lbService(), nodes); return err },
		"UpdateLoadBalancer": func() error { return lb.UpdateLoadBalancer(ctx, "cluster", lbService(), nodes) },
	} {
		err := call()
		if !errors.Is(err, plugin.ErrMessageTooLarge) {
			t.Fatalf("%s with 5,000 backends in one message: %v, want plugin.ErrMessageTooLarge", name, err)
		}
		if after, ok := provider.RetryAfter(err); ok {
			t.Errorf("%s: a message too large reads as a throttle (retry after %s): %v", name, after, err)
		}
		if got := provider.Reason(err); got != plugin.ReasonMessageTooLarge {
			t.Errorf("%s: reason %q, want %q", name, got, plugin.ReasonMessageTooLarge)
		}
		for _, want := range []string{"5000 backend nodes", "LOAD_BALANCER_STREAM"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", name, err, want)
			}
		}
	}
}

// A streamed call made while the plugin is down says so, as a unary call
// does: its error lands in the Service's Events.
func TestStreamedCallSaysThePluginIsUnreachable(t *testing.T) {
	endpoint, _ := socket(t)
	stop := serve(t, endpoint, &backends{})
	lb, _ := dial(t, endpoint).LoadBalancer()
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := lb.EnsureLoadBalancer(ctx, "cluster", lbService(), kubeletNodes(10))
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), endpoint) {
		t.Errorf("EnsureLoadBalancer with the plugin down: %v, want an error naming %s unreachable", err, endpoint)
	}
}
