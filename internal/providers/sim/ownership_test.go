package sim

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testobj"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// A cloud-config pointing at the wrong server (here one answering a bare
// 404 for every path, as a proxy's default page does) must never read as
// "the instance is gone": that would delete every NotReady node.
func TestBare404IsNotInstanceGone(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	cp, err := New(strings.NewReader("endpoint: " + srv.URL + "\nretries: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cp.(*Provider)
	ctx := context.Background()
	n := nodeNamed("n1", "sim://i-1")
	if exists, err := p.InstanceExists(ctx, n); err == nil {
		t.Errorf("InstanceExists = %v with no error; want an error for a bare 404", exists)
	}
	if _, err := p.InstanceMetadata(ctx, n); err == nil || err == cloudprovider.InstanceNotFound {
		t.Errorf("InstanceMetadata error = %v; want an error other than InstanceNotFound", err)
	}
	svc := lbService("web", "uid-1", nil)
	if _, exists, err := p.GetLoadBalancer(ctx, "c", svc); err == nil {
		t.Errorf("GetLoadBalancer = exists %v with no error; want an error for a bare 404", exists)
	}
}

func lbService(name, uid string, class *string) *corev1.Service {
	return testobj.LBService("default", name, testobj.UID(uid), testobj.Class(class), testobj.NodePort(80, 30080))
}

// A load balancer records what it was made for, and the provider changes
// only what that record proves is the caller's.
func TestLoadBalancerOwnership(t *testing.T) {
	c, p := start(t)
	ctx := context.Background()
	mine := lbService("web", "uid-1", ptr.To("example.com/a"))
	if _, err := p.EnsureLoadBalancer(ctx, "prod", mine, nil); err != nil {
		t.Fatal(err)
	}
	owner, exists, err := p.LoadBalancerOwner(ctx, "prod", mine)
	if err != nil || !exists || !owner.Owns("prod", "uid-1", "example.com/a") {
		t.Fatalf("LoadBalancerOwner = %+v, %v, %v", owner, exists, err)
	}
	name := cloudprovider.DefaultLoadBalancerName(mine)

	// Another class's CCM (the Service's class moved) may not take it over.
	moved := mine.DeepCopy()
	moved.Spec.LoadBalancerClass = nil
	_, err = p.EnsureLoadBalancer(ctx, "prod", moved, nil)
	if provider.Reason(err) != ReasonNotOwned {
		t.Errorf("ensure under another class: %v (reason %s), want %s", err, provider.Reason(err), ReasonNotOwned)
	}
	if err := p.UpdateLoadBalancer(ctx, "prod", moved, nil); provider.Reason(err) != ReasonNotOwned {
		t.Errorf("update under another class: %v, want %s", err, ReasonNotOwned)
	}

	// Another cluster sees nothing under the name and deletes nothing.
	if _, exists, err := p.GetLoadBalancer(ctx, "prod-dev", mine); err != nil || exists {
		t.Errorf("another cluster's GetLoadBalancer = %v, %v; want not there", exists, err)
	}
	if err := p.EnsureLoadBalancerDeleted(ctx, "prod-dev", mine); err != nil {
		t.Errorf("another cluster's delete: %v", err)
	}
	if _, ok := c.GetLoadBalancer(name); !ok {
		t.Fatal("another cluster's delete removed the load balancer")
	}

	// Its maker deletes it, whatever the Service's class is now.
	if err := p.EnsureLoadBalancerDeleted(ctx, "prod", moved); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.GetLoadBalancer(name); ok {
		t.Error("the load balancer was not deleted by its cluster")
	}
}

// Routes belong to the cluster named exactly, not to every cluster whose
// name starts the same.
func TestRoutesOfTheClusterNamedExactly(t *testing.T) {
	c, p := start(t)
	ctx := context.Background()
	for _, cl := range []string{"k", "k-dev"} {
		if _, err := c.Create(simcloud.CreateRequest{Name: cl + "-node"}); err != nil {
			t.Fatal(err)
		}
		r := &cloudprovider.Route{TargetNode: types.NodeName(cl + "-node"), DestinationCIDR: "198.18.0.0/24"}
		if err := p.CreateRoute(ctx, cl, "uid-"+cl, r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.ListRoutes(ctx, "k")
	if err != nil || len(got) != 1 || got[0].TargetNode != "k-node" {
		t.Fatalf("ListRoutes(k) = %v, %v; want only k's route", got, err)
	}
	dev, _ := p.ListRoutes(ctx, "k-dev")
	if err := p.DeleteRoute(ctx, "k", dev[0]); err == nil {
		t.Error("cluster k deleted cluster k-dev's route")
	}
	if after, _ := p.ListRoutes(ctx, "k-dev"); len(after) != 1 {
		t.Errorf("cluster k-dev has %d routes after k's delete, want 1", len(after))
	}
}
