package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestSpecFingerprint(t *testing.T) {
	base := func() *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u1", Annotations: map[string]string{"a": "1"}},
			Spec: corev1.ServiceSpec{
				Type:  corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}},
			},
		}
	}
	tests := []struct {
		name    string
		mutate  func(*corev1.Service)
		changes bool
	}{
		{"nothing", func(*corev1.Service) {}, false},
		{"status", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}}
		}, false},
		{"finalizers and labels", func(s *corev1.Service) {
			s.Finalizers = []string{Finalizer}
			s.Labels = map[string]string{"x": "y"}
		}, false},
		{"selector", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "b"} }, false},
		{"port added", func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053})
		}, true},
		{"node port changed", func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30081 }, true},
		{"source ranges", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.18.0.0/15"} }, true},
		{"affinity", func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }, true},
		{"affinity timeout", func(s *corev1.Service) {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}, true},
		{"loadBalancerIP", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "1.2.3.4" }, true},
		{"traffic policy", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }, true},
		{"health check port", func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 31000 }, true},
		{"ip families", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}, true},
		{"annotation", func(s *corev1.Service) { s.Annotations["a"] = "2" }, true},
		{"app protocol", func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr.To("h2c") }, true},
		{"external IPs", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.18.0.1"} }, true},
		// Upstream's needsUpdate ignores these: no EnsureLoadBalancer.
		{"ip family policy alone", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
		}, false},
		{"allocateLoadBalancerNodePorts alone", func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = ptr.To(false) }, false},
		{"recreated (new UID)", func(s *corev1.Service) { s.UID = "u2" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			tt.mutate(s)
			if got := specFingerprint(s) != specFingerprint(base()); got != tt.changes {
				t.Errorf("fingerprint changed = %v, want %v", got, tt.changes)
			}
		})
	}
}

// needsSync is upstream's enqueue test for a Service update.
func TestNeedsSync(t *testing.T) {
	base := func() *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "u1"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}},
		}
	}
	now := metav1.Now()
	tests := []struct {
		name   string
		mutate func(*corev1.Service)
		want   bool
	}{
		{"status only", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.0.1"}}
		}, false},
		{"finalizer added", func(s *corev1.Service) { s.Finalizers = []string{Finalizer} }, false},
		{"selector", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"a": "b"} }, false},
		{"port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }, true},
		{"type", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }, true},
		{"deleted", func(s *corev1.Service) { s.DeletionTimestamp = &now }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base()
			tt.mutate(cur)
			if got := needsSync(base(), cur); got != tt.want {
				t.Errorf("needsSync = %v, want %v", got, tt.want)
			}
		})
	}
	// Any update of a Service that still carries the finalizer but no longer
	// wants a load balancer, as upstream's needsCleanup.
	old, cur := base(), base()
	old.Spec.Type, cur.Spec.Type = corev1.ServiceTypeClusterIP, corev1.ServiceTypeClusterIP
	old.Finalizers, cur.Finalizers = []string{Finalizer}, []string{Finalizer}
	cur.Labels = map[string]string{"x": "y"}
	if !needsSync(old, cur) {
		t.Error("a Service with the finalizer left to clean up was not synced")
	}
}
