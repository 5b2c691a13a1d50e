package sim

import (
	"context"
	"maps"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// twoClusters is one cloud and a provider for each of two clusters that
// share a --cluster-name but not an identity (provider.ClusterIdentity).
func twoClusters(t *testing.T) (*simcloud.Cloud, *Provider, *Provider) {
	t.Helper()
	c, a := start(t)
	b := connect(t, a.client.BaseURL, 0)
	a.SetClusterID("id-a")
	b.SetClusterID("id-b")
	return c, a, b
}

// Every load balancer records the identity of the cluster that made it,
// and the record is what tells two clusters of the same name apart.
func TestLoadBalancersCarryTheClusterIdentity(t *testing.T) {
	c, a, b := twoClusters(t)
	ctx := context.Background()
	svcA, svcB := lbService("web", "uid-a", nil), lbService("web", "uid-b", nil)
	if _, err := a.EnsureLoadBalancer(ctx, "kubernetes", svcA, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureLoadBalancer(ctx, "kubernetes", svcB, nil); err != nil {
		t.Fatal(err)
	}
	owned, err := a.ListLoadBalancerOwners(ctx, "kubernetes")
	if err != nil || len(owned) != 2 {
		t.Fatalf("ListLoadBalancerOwners = %v, %v; want both clusters' records (the sweep decides by identity)", owned, err)
	}
	ids := map[types.UID]string{}
	for _, o := range owned {
		ids[o.ServiceUID] = o.ClusterID
		if o.OfCluster("id-a") != (o.ServiceUID == "uid-a") {
			t.Errorf("record %+v: OfCluster(id-a) = %v", o, o.OfCluster("id-a"))
		}
	}
	if ids["uid-a"] != "id-a" || ids["uid-b"] != "id-b" {
		t.Errorf("recorded identities = %v, want uid-a: id-a, uid-b: id-b", ids)
	}
	owner, exists, err := a.LoadBalancerOwner(ctx, "kubernetes", svcA)
	if err != nil || !exists || owner.ClusterID != "id-a" {
		t.Errorf("LoadBalancerOwner = %+v, %v, %v; want id-a", owner, exists, err)
	}
	// Another cluster's load balancer is never changed, whatever is asked.
	before, _ := c.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svcB))
	if err := a.EnsureLoadBalancerDeleted(ctx, "kubernetes", svcB); err != nil {
		t.Errorf("delete of another cluster's load balancer: %v, want nil (not there for this cluster)", err)
	}
	if _, err := a.EnsureLoadBalancer(ctx, "kubernetes", svcB, nil); err == nil {
		t.Error("cluster a ensured cluster b's load balancer")
	}
	if _, exists, _ := a.GetLoadBalancer(ctx, "kubernetes", svcB); exists {
		t.Error("cluster a sees cluster b's load balancer")
	}
	after, ok := c.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svcB))
	if !ok || after.VIP != before.VIP || after.Tags[TagClusterID] != "id-b" {
		t.Errorf("cluster b's load balancer changed: before %+v, after %+v (exists %v)", before, after, ok)
	}
}

// A load balancer made before it carried an identity (cluster name and
// Service UID only, as the upstream CCM makes them) is served for the
// Service whose UID it names, and left as it is: it keeps its address, and
// an ensure of it changes nothing (a switch between CCMs recreates and
// rewrites nothing). Deleting it for that Service works too.
func TestLoadBalancerWithoutIdentityServed(t *testing.T) {
	c, a, _ := twoClusters(t)
	ctx := context.Background()
	svc := lbService("web", "uid-1", nil)
	name := cloudprovider.DefaultLoadBalancerName(svc)
	legacy := map[string]string{TagCluster: "kubernetes", TagServiceUID: "uid-1", TagClass: "", TagService: "default/web"}
	old, err := c.PutLoadBalancer(name, simcloud.LoadBalancerSpec{
		Tags:      legacy,
		Listeners: []simcloud.Listener{{Protocol: "TCP", Port: 80, NodePort: 30080}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, exists, err := a.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || !exists {
		t.Fatalf("GetLoadBalancer of the Service's own old load balancer = %v, %v", exists, err)
	}
	st, err := a.EnsureLoadBalancer(ctx, "kubernetes", svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := c.GetLoadBalancer(name)
	if st.Ingress[0].IP != old.VIP || !maps.Equal(lb.Tags, legacy) {
		t.Errorf("after the ensure: VIP %s (was %s), tags %v; want the same VIP and the record as it was %v", st.Ingress[0].IP, old.VIP, lb.Tags, legacy)
	}
	if err := a.UpdateLoadBalancer(ctx, "kubernetes", svc, nil); err != nil {
		t.Errorf("update of the Service's old load balancer: %v", err)
	}
	if err := a.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.GetLoadBalancer(name); ok {
		t.Error("the Service's old load balancer was not deleted")
	}
}

// Routes: each cluster lists and deletes only its own, although both have
// the same name. A route made before it carried an identity is listed, so
// its node's route is kept as it is (no write), but never deleted: it may
// be another cluster's of the same name.
func TestRoutesOfTheClusterIdentity(t *testing.T) {
	c, a, b := twoClusters(t)
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b", "node-old"} {
		if _, err := c.Create(simcloud.CreateRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	ra := &cloudprovider.Route{TargetNode: "node-a", DestinationCIDR: "198.18.1.0/24"}
	rb := &cloudprovider.Route{TargetNode: "node-b", DestinationCIDR: "198.18.2.0/24"}
	if err := a.CreateRoute(ctx, "kubernetes", "uid-node-a", ra); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateRoute(ctx, "kubernetes", "uid-node-b", rb); err != nil {
		t.Fatal(err)
	}
	old := simcloud.Route{Name: routeName("kubernetes", "uid-node-old", "198.18.3.0/24"), Destination: "198.18.3.0/24",
		Target: "node-old", Tags: map[string]string{TagCluster: "kubernetes"}}
	if _, err := c.CreateRoute(old); err != nil {
		t.Fatal(err)
	}
	targets := func(p *Provider) []string {
		rs, err := p.ListRoutes(ctx, "kubernetes")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, string(r.TargetNode))
		}
		slices.Sort(out)
		return out
	}
	if got := targets(a); !slices.Equal(got, []string{"node-a", "node-old"}) {
		t.Errorf("cluster a lists routes to %v, want its own and the one without an identity", got)
	}
	if got := targets(b); !slices.Equal(got, []string{"node-b", "node-old"}) {
		t.Errorf("cluster b lists routes to %v, want its own and the one without an identity", got)
	}
	theirs, _ := b.ListRoutes(ctx, "kubernetes")
	for _, r := range theirs {
		if err := a.DeleteRoute(ctx, "kubernetes", r); err == nil && r.TargetNode != "node-a" {
			t.Errorf("cluster a deleted the route to %s", r.TargetNode)
		}
	}
	// Its node's route, made before: success, and left as it is.
	if err := a.CreateRoute(ctx, "kubernetes", "uid-node-old", &cloudprovider.Route{TargetNode: "node-old", DestinationCIDR: "198.18.3.0/24"}); err != nil {
		t.Errorf("CreateRoute of a node whose route was made before: %v", err)
	}
	tags := map[string]map[string]string{}
	for _, r := range c.Routes() {
		tags[r.Target] = r.Tags
	}
	want := map[string]string{"node-a": "id-a", "node-b": "id-b", "node-old": ""}
	for n, id := range want {
		if tags[n] == nil || tags[n][TagClusterID] != id || tags[n][TagCluster] != "kubernetes" {
			t.Errorf("route to %s tagged %v, want cluster-id %q", n, tags[n], id)
		}
	}
}

// A CCM that gives the provider no identity (the upstream CCM, after a
// switch back) works as before identities: by the cluster name, on routes
// and load balancers Outrigger tagged with one too.
func TestWithoutIdentityByName(t *testing.T) {
	c, a, _ := twoClusters(t)
	ctx := context.Background()
	plain := connect(t, a.client.BaseURL, 0) // a's cloud, no identity
	if _, err := c.Create(simcloud.CreateRequest{Name: "node-a"}); err != nil {
		t.Fatal(err)
	}
	r := &cloudprovider.Route{TargetNode: "node-a", DestinationCIDR: "198.18.1.0/24"}
	if err := a.CreateRoute(ctx, "kubernetes", "uid-node-a", r); err != nil {
		t.Fatal(err)
	}
	if got, err := plain.ListRoutes(ctx, "kubernetes"); err != nil || len(got) != 1 {
		t.Errorf("ListRoutes without an identity = %v, %v; want the route by name", got, err)
	}
	if err := plain.CreateRoute(ctx, "kubernetes", "uid-node-a", r); err != nil {
		t.Errorf("CreateRoute of the existing route without an identity: %v", err)
	}
	svc := lbService("web", "uid-1", nil)
	if _, err := a.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); err != nil {
		t.Errorf("ensure without an identity of a load balancer tagged with one: %v", err)
	}
	if err := plain.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.GetLoadBalancer(cloudprovider.DefaultLoadBalancerName(svc)); ok {
		t.Error("the load balancer was not deleted without an identity")
	}
}
