package upstreamfake

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

func TestBackendKeyIgnoresOrder(t *testing.T) {
	if BackendKey([]string{"a", "b", "c"}) != BackendKey([]string{"c", "a", "b"}) {
		t.Fatal("the order changed the key")
	}
	if BackendKey([]string{"a", "b"}) == BackendKey([]string{"a", "c"}) {
		t.Fatal("two sets share a key")
	}
	// The 64-bit FNV-1a of "a" (the published test vector), once.
	if got := BackendKey([]string{"a"}); got != "1/af63dc4c8601ec8c" {
		t.Fatalf("key of {a} is %q", got)
	}
	if !strings.HasPrefix(BackendKey([]string{"a", "b"}), "2/") {
		t.Fatalf("key %q does not start with the count", BackendKey([]string{"a", "b"}))
	}
}

func TestLoadBalancersCountBackendSets(t *testing.T) {
	cloud, err := New(strings.NewReader("loadBalancers: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	lbs, ok := cloud.LoadBalancer()
	if !ok {
		t.Fatal("no load balancers offered")
	}
	ctx := context.Background()
	svc := func(uid string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	}
	nodes := func(names ...string) []*corev1.Node {
		var out []*corev1.Node
		for _, n := range names {
			out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		return out
	}
	if _, exists, err := lbs.GetLoadBalancer(ctx, "k", svc("one")); err != nil || exists {
		t.Fatalf("before any ensure: exists %v, err %v", exists, err)
	}
	st, err := lbs.EnsureLoadBalancer(ctx, "k", svc("one"), nodes("a", "b"))
	if err != nil || len(st.Ingress) != 1 || !strings.HasPrefix(st.Ingress[0].IP, "198.18.128.") {
		t.Fatalf("ensure: %v, %v", st, err)
	}
	if _, err := lbs.EnsureLoadBalancer(ctx, "k", svc("two"), nodes("a", "b")); err != nil {
		t.Fatal(err)
	}
	if err := lbs.UpdateLoadBalancer(ctx, "k", svc("two"), nodes("b", "c")); err != nil {
		t.Fatal(err)
	}
	if err := lbs.UpdateLoadBalancer(ctx, "k", svc("three"), nodes("a")); err == nil {
		t.Fatal("updating a load balancer that does not exist succeeded")
	}
	c := cloud.(*provider).counts()
	if len(c.Backends) != 2 || c.Backends[BackendKey([]string{"a", "b"})] != 1 || c.Backends[BackendKey([]string{"b", "c"})] != 1 {
		t.Fatalf("backend sets %v, want one load balancer on {a, b} and one on {b, c}", c.Backends)
	}
	if c.BackendWrites != 3 {
		t.Fatalf("%d backend writes, want 3", c.BackendWrites)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "k", svc("one")); err != nil {
		t.Fatal(err)
	}
	if c := cloud.(*provider).counts(); len(c.Backends) != 1 {
		t.Fatalf("after a delete: backend sets %v", c.Backends)
	}
	var _ cloudprovider.LoadBalancer = lbs
}

func TestNoLoadBalancersUnlessAsked(t *testing.T) {
	cloud, err := New(strings.NewReader("nodes: [a]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cloud.LoadBalancer(); ok {
		t.Fatal("load balancers offered without loadBalancers: true")
	}
}
