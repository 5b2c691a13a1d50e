package sim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The idle timeout annotation is read under its outrigger.dev name and,
// where that is absent, under the outrigger.io name of earlier releases, so
// a Service written for them keeps its load balancer's setting.
func TestIdleTimeoutAnnotationOldAndNewNames(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        int
	}{
		{map[string]string{AnnotationIdleTimeout: "30"}, 30},
		{map[string]string{AnnotationIdleTimeoutDeprecated: "40"}, 40},
		{map[string]string{AnnotationIdleTimeout: "30", AnnotationIdleTimeoutDeprecated: "40"}, 30},
		{nil, 0},
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "u", Annotations: tc.annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		spec, err := lbSpec("c", svc, nil)
		if err != nil {
			t.Fatalf("%v: %v", tc.annotations, err)
		}
		if spec.IdleTimeoutSeconds != tc.want {
			t.Errorf("%v: idle timeout %d, want %d", tc.annotations, spec.IdleTimeoutSeconds, tc.want)
		}
	}
}
