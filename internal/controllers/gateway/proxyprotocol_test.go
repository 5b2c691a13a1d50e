package gateway

import (
	"context"
	"maps"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/providers/local"
)

// The table names the local provider's annotation as the local provider
// reads it.
func TestLocalProvidersAskIsItsAnnotation(t *testing.T) {
	for _, name := range []string{local.ProviderName, "dev"} {
		ask, ok := proxyProtocolAskOf(name)
		if !ok || ask.key != local.AnnotationProxyProtocol || ask.value != "v2" {
			t.Errorf("%s: %+v, %v; want %s: v2", name, ask, ok, local.AnnotationProxyProtocol)
		}
	}
}

// The Service's annotations: spec.infrastructure's, plus the provider's
// PROXY protocol annotation when the setting is on, the owner's own value
// winning; with the setting off the provider's key goes, unless the owner
// gives it; a provider without an entry gets nothing added or removed.
func TestServiceAnnotationsAskTheProviderForProxyProtocol(t *testing.T) {
	const aws = "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol"
	for _, tc := range []struct {
		name       string
		provider   string
		on         bool
		infra      map[string]string
		set        map[string]string
		remove     []string
		infraAfter map[string]string
	}{
		{name: "aws, on", provider: "aws", on: true, infra: map[string]string{"a": "b"}, set: map[string]string{"a": "b", aws: "*"}},
		{name: "aws, off", provider: "aws", infra: map[string]string{"a": "b"}, set: map[string]string{"a": "b"}, remove: []string{aws}},
		{name: "local, on", provider: "local", on: true, set: map[string]string{"local.outrigger.dev/proxy-protocol": "v2"}},
		{name: "linode, the owner's v1 wins", provider: "linode", on: true,
			infra: map[string]string{"service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol": "v1"},
			set:   map[string]string{"service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol": "v1"}},
		{name: "hcloud, off, the owner's kept", provider: "hcloud",
			infra: map[string]string{"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"},
			set:   map[string]string{"load-balancer.hetzner.cloud/uses-proxyprotocol": "true"}},
		{name: "a provider without an entry, on", provider: "grpc", on: true, infra: map[string]string{"x": "y"}, set: map[string]string{"x": "y"}},
		{name: "a provider without an entry, off", provider: "grpc", set: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.infra)
			set, remove := serviceAnnotations(tc.provider, tc.on, tc.infra)
			if !reflect.DeepEqual(set, tc.set) || !reflect.DeepEqual(remove, tc.remove) {
				t.Errorf("set %v remove %v, want set %v remove %v", set, remove, tc.set, tc.remove)
			}
			if !maps.Equal(tc.infra, before) {
				t.Errorf("the Gateway's annotations were changed: %v, were %v", tc.infra, before)
			}
		})
	}
}

// A Gateway whose parameters set proxyProtocol gets a load balancer
// Service that asks the cluster's provider (local here) for PROXY
// protocol, beside the annotations of spec.infrastructure; turning the
// setting off takes the provider's annotation away and leaves the
// Gateway's.
func TestLoadBalancerServiceAsksForProxyProtocol(t *testing.T) {
	ctx := context.Background()
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw", UID: "gw-uid"},
		Spec: gwv1.GatewaySpec{Infrastructure: &gwv1.GatewayInfrastructure{
			Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{"example.com/team": "edge"},
		}},
	}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	r := &reconciler{client: c, reader: c, own: c, opts: Options{ControllerName: goldenController, Namespace: DefaultNamespace, ProviderName: "local"}}
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}
	annotations := func(on bool) map[string]string {
		t.Helper()
		params := defaultParameters()
		params.settings = &dataplane.Settings{ProxyProtocol: on}
		if _, err := r.ensureService(ctx, gw, ports, params); err != nil {
			t.Fatal(err)
		}
		var svc corev1.Service
		if err := c.Get(ctx, types.NamespacedName{Namespace: DefaultNamespace, Name: DataPlaneName("edge", "gw")}, &svc); err != nil {
			t.Fatal(err)
		}
		return svc.Annotations
	}
	if got, want := annotations(true), map[string]string{"example.com/team": "edge", local.AnnotationProxyProtocol: "v2"}; !maps.Equal(got, want) {
		t.Errorf("with proxyProtocol the Service's annotations are %v, want %v", got, want)
	}
	if got, want := annotations(false), map[string]string{"example.com/team": "edge"}; !maps.Equal(got, want) {
		t.Errorf("with proxyProtocol turned off the Service's annotations are %v, want %v", got, want)
	}
}
