package local

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
)

// A new leader (a fresh provider) has no load balancers, but Services still
// advertise the addresses the old one gave them: none of those may go to
// another Service, and each holder gets its own back.
func TestAddressesHeldByStatusesAreNotReused(t *testing.T) {
	ctx := context.Background()
	np := freeport.Get(t)
	holder := service("holder", tcpPort(freeport.Get(t), np))
	// The first address the pool would hand out.
	holder.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.105.1"}}
	client := fake.NewClientset(holder)

	cp, err := New(strings.NewReader("pool: 127.0.105.0/24\nhealthCheck: {disabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cp.(*Provider)
	t.Cleanup(p.lbs.closeAll)
	factory := informers.NewSharedInformerFactory(client, 0)
	p.SetInformers(factory)
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	newcomer := service("newcomer", tcpPort(freeport.Get(t), np))
	st, err := p.lbs.EnsureLoadBalancer(ctx, "c", newcomer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Ingress[0].IP; got == "127.0.105.1" {
		t.Fatalf("a new Service was given %s, which another Service's status holds", got)
	}
	asked := service("asked", tcpPort(freeport.Get(t), np))
	asked.Spec.LoadBalancerIP = "127.0.105.1"
	if _, err := p.lbs.EnsureLoadBalancer(ctx, "c", asked, nil); err == nil {
		t.Fatal("spec.loadBalancerIP was given although another Service's status holds it")
	}
	st, err = p.lbs.EnsureLoadBalancer(ctx, "c", holder, nil)
	if err != nil || st.Ingress[0].IP != "127.0.105.1" {
		t.Fatalf("the holder got %v, %v; want its own address back", st, err)
	}
}
