package plugin_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// What a provider says of what it owns crosses the plugin boundary: the
// providerID schemes of its nodes, and each load balancer's ownership
// record, so that a plugin provider is as safe beside other CCMs as a
// linked one. The cluster's identity crosses it too: Outrigger hands it the
// client, the plugin's provider records it, and the records carry it back.
func TestOwnershipCrossesTheBoundary(t *testing.T) {
	c := testenv.StartCloud(t)
	if _, err := c.Create(simcloud.CreateRequest{Name: "owner-1"}); err != nil {
		t.Fatal(err)
	}
	endpoint, _ := socket(t)
	serve(t, endpoint, simProvider(t, c))
	p := dial(t, endpoint)
	identity, ok := p.(provider.ClusterIdentity)
	if !ok {
		t.Fatal("the plugin client takes no cluster identity")
	}
	identity.SetClusterID("uid-of-kube-system")

	platforms, ok := p.(provider.Platforms)
	if !ok || !slices.Equal(platforms.Platforms(), []string{"sim"}) {
		t.Errorf("the plugin's platforms: %v (stated: %v), want [sim]", platforms, ok)
	}
	lb, _ := p.LoadBalancer()
	owners, ok := lb.(provider.LoadBalancerOwnership)
	if !ok {
		t.Fatal("the plugin's load balancers carry no ownership records")
	}
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: ptr.To("example.com/x"),
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}}},
	}
	if _, _, err := owners.LoadBalancerOwner(ctx, "kubernetes", svc); err != nil {
		t.Fatalf("LoadBalancerOwner before ensure: %v", err)
	}
	if _, exists, _ := owners.LoadBalancerOwner(ctx, "kubernetes", svc); exists {
		t.Fatal("a load balancer exists before any was made")
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "owner-1"}, Status: corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.7.1"}}}}
	if _, err := lb.EnsureLoadBalancer(ctx, "kubernetes", svc, []*corev1.Node{node}); err != nil {
		t.Fatal(err)
	}
	owner, exists, err := owners.LoadBalancerOwner(ctx, "kubernetes", svc)
	if err != nil || !exists || !owner.Owns("kubernetes", "uid-web", "example.com/x") || !owner.OfCluster("uid-of-kube-system") {
		t.Errorf("LoadBalancerOwner = %+v, %v, %v; want kubernetes's, its identity, the Service's UID and class", owner, exists, err)
	}
	if tags := c.LoadBalancers()[0].Tags; tags["cluster-id"] != "uid-of-kube-system" {
		t.Errorf("the load balancer the plugin made is tagged %v, want cluster-id uid-of-kube-system", tags)
	}
	list, err := owners.ListLoadBalancerOwners(ctx, "kubernetes")
	if err != nil || len(list) != 1 || list[0].ServiceUID != "uid-web" || list[0].ServiceName != "web" || list[0].ServiceNamespace != "default" ||
		list[0].ClusterID != "uid-of-kube-system" {
		t.Errorf("ListLoadBalancerOwners = %+v, %v", list, err)
	}
	if other, err := owners.ListLoadBalancerOwners(ctx, "kubernetes-dev"); err != nil || len(other) != 0 {
		t.Errorf("another cluster's list: %+v, %v; want none", other, err)
	}
}
