package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// oversized answers a load balancer status of 2 MiB and a route table of
// 2 MiB.
type oversized struct{ fakecloud.Cloud }

func (o *oversized) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return o, true }
func (o *oversized) Routes() (cloudprovider.Routes, bool)             { return o, true }
func (o *oversized) EnsureLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{Hostname: strings.Repeat("x", 2<<20)}}}, nil
}
func (o *oversized) ListRoutes(context.Context, string) ([]*cloudprovider.Route, error) {
	var out []*cloudprovider.Route
	for i := range 20_000 {
		out = append(out, &cloudprovider.Route{Name: fmt.Sprintf("route-%06d-%s", i, strings.Repeat("r", 64)),
			TargetNode: types.NodeName(fmt.Sprintf("node-%06d", i)), DestinationCIDR: fmt.Sprintf("198.19.%d.%d/32", i>>8&255, i&255)})
	}
	return out, nil
}

// An answer about one object over MaxObjectAnswerBytes fails its call as
// MessageTooLarge; a list answer of the same size is served (up to
// MaxAnswerBytes).
func TestObjectAnswersBounded(t *testing.T) {
	endpoint, _ := socket(t)
	serve(t, endpoint, &oversized{})
	p := dial(t, endpoint)
	lb, _ := p.LoadBalancer()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	_, err := lb.EnsureLoadBalancer(context.Background(), "kubernetes", svc, nil)
	if !errors.Is(err, plugin.ErrMessageTooLarge) || provider.Reason(err) != plugin.ReasonMessageTooLarge {
		t.Errorf("a 2 MiB load balancer status: %v (reason %q), want %s", err, provider.Reason(err), plugin.ReasonMessageTooLarge)
	}
	routes, _ := p.Routes()
	got, err := routes.ListRoutes(context.Background(), "kubernetes")
	if err != nil || len(got) != 20_000 {
		t.Errorf("a route table over 1 MiB: %d routes, %v; want all 20000", len(got), err)
	}
}
