package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
)

// hangingLB never returns for the Services its Hang selects and answers
// the others.
type hangingLB struct{ hang *providertest.Hang }

func (h hangingLB) GetLoadBalancer(context.Context, string, *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}

func (h hangingLB) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

func (h hangingLB) EnsureLoadBalancer(_ context.Context, _ string, svc *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if h.hang.Wait(svc.Name) {
		return nil, errors.New("released")
	}
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.3.1"}}}, nil
}

func (h hangingLB) UpdateLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) error {
	return nil
}

func (h hangingLB) EnsureLoadBalancerDeleted(context.Context, string, *corev1.Service) error {
	return nil
}

type hangingCloud struct {
	*fake.Cloud
	lb hangingLB
}

func (c hangingCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.lb, true }

// Over the plugin boundary too, a provider hung on some Services costs
// only them: more calls hang in the plugin than the family runs at once.
// The plugin client gives up on each just before the layer's deadline (so
// its error, naming the plugin, is what the caller sees) and the gRPC
// server runs every other call beside the hung handlers: every other
// Service's call still gets through.
func TestHungPluginCallsCostOnlyTheirObjects(t *testing.T) {
	endpoint, _ := socket(t)
	hang := providertest.NewHang(t, providertest.Prefix("hang-"))
	serve(t, endpoint, hangingCloud{Cloud: &fake.Cloud{}, lb: hangingLB{hang}})
	t.Cleanup(hang.Release) // again, before the server stops
	layer := cloud.New(dial(t, endpoint), cloud.Options{Timeout: 200 * time.Millisecond})
	lb, _ := layer.LoadBalancer()
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}}}}
	}
	const hung = cloud.DegradedAbandoned + 4
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range hung {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := lb.EnsureLoadBalancer(ctx, "c", svc(fmt.Sprintf("hang-%d", i)), nil)
			if err == nil || !strings.Contains(err.Error(), "EnsureLoadBalancer") {
				t.Errorf("hang-%d: err = %v, want the plugin call's deadline error", i, err)
			}
		}()
	}
	wg.Wait()
	for i := range 10 {
		if st, err := lb.EnsureLoadBalancer(ctx, "c", svc(fmt.Sprintf("ok-%d", i)), nil); err != nil || len(st.Ingress) != 1 {
			t.Fatalf("ok-%d behind %d hung calls: %v, %v", i, hung, st, err)
		}
	}
}
