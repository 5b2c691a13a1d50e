package sim

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// FuzzCloudConfig feeds --cloud-config files through the parser: a
// malformed one is an error saying it is the cloud-config, never a panic,
// and one that parses has what the client needs.
func FuzzCloudConfig(f *testing.F) {
	f.Add("endpoint: http://127.0.0.1:8480\n")
	f.Add("endpoint: http://127.0.0.1:8480\nrequestTimeout: 2s\nretries: 0\ncaller: a\n")
	f.Add(`{"endpoint": "https://sim.example", "retries": -1}`)
	f.Add("endpoint: ftp://x\n")
	f.Add("endpoint: http://x\nrequestTimeout: -1s\n")
	f.Add("endpont: http://x\n")
	f.Add("")
	f.Add("endpoint: [a, b]\n")
	f.Fuzz(func(t *testing.T, config string) {
		cfg, timeout, retries, err := ParseConfig(strings.NewReader(config))
		if err != nil {
			if !strings.Contains(err.Error(), "cloud-config") {
				t.Fatalf("error does not say it is about the cloud-config: %v", err)
			}
			return
		}
		if cfg.Endpoint == "" || timeout <= 0 || retries < 0 {
			t.Fatalf("accepted %q as endpoint %q, timeout %s, retries %d", config, cfg.Endpoint, timeout, retries)
		}
	})
}

// FuzzServiceAnnotations feeds the Service fields and annotations a user
// sets through the load balancer spec: a malformed value is an
// InvalidAnnotation error naming the annotation (the controller's Event on
// the Service), never a panic.
func FuzzServiceAnnotations(f *testing.F) {
	f.Add("60", "198.18.0.0/15, 192.0.2.0/24", "", "")
	f.Add("0", "", "198.18.0.0/15", "")
	f.Add("3601", "not-a-cidr", "", "")
	f.Add("  7", "::/0", "", "192.0.2.10")
	f.Add("1e3", "198.18.0.0/15,,", "198.18.0.1", "x")
	f.Fuzz(func(t *testing.T, idle, rangesAnnotation, rangesSpec, loadBalancerIP string) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: map[string]string{
				AnnotationIdleTimeout:                        idle,
				corev1.AnnotationLoadBalancerSourceRangesKey: rangesAnnotation,
			}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: loadBalancerIP,
				Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}},
		}
		if rangesSpec != "" {
			svc.Spec.LoadBalancerSourceRanges = strings.Split(rangesSpec, ",")
		}
		_, err := lbSpec("c", svc, nil)
		if err == nil {
			return
		}
		if cloud.Reason(err) != provider.ReasonInvalidAnnotation {
			t.Fatalf("reason %q, want %q: %v", cloud.Reason(err), provider.ReasonInvalidAnnotation, err)
		}
		if !strings.Contains(err.Error(), "annotation ") {
			t.Fatalf("error does not name the annotation: %v", err)
		}
	})
}
