package local

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// FuzzCloudConfig feeds --cloud-config files through the local provider's
// parser: a malformed one is an error about the cloud-config, never a
// panic, and a pool that parses has a usable address.
func FuzzCloudConfig(f *testing.F) {
	f.Add("pool: 127.0.100.0/24\n")
	f.Add("pool: 127.0.100.0/32\ndataPlane: nodes\n")
	f.Add("pool: 127.0.100.0/31\nhealthCheck:\n  kubeProxyPort: 70000\n")
	f.Add("healthCheck:\n  interval: -2s\n  unhealthyThreshold: 0\n")
	f.Add("instances:\n  url: gopher://x\n")
	f.Add("pool: ::1/128\n")
	f.Add("poool: 1\n")
	f.Fuzz(func(t *testing.T, config string) {
		s, err := parseConfig(strings.NewReader(config))
		if err != nil {
			if !strings.Contains(err.Error(), "cloud-config") {
				t.Fatalf("error does not say it is about the cloud-config: %v", err)
			}
			return
		}
		if !s.pool.IsValid() || s.interval <= 0 || s.timeout <= 0 || s.unhealthyThreshold < 1 {
			t.Fatalf("accepted %q as %+v", config, s)
		}
	})
}

// FuzzServiceAnnotations feeds what a user sets on a Service through the
// local balancer's configuration: a malformed value is an error with a
// reason (the controller's Event on the Service), never a panic.
func FuzzServiceAnnotations(f *testing.F) {
	f.Add("198.18.0.0/15", "", "TCP", int32(30080), int32(0), true)
	f.Add("not-a-cidr", "", "UDP", int32(30080), int32(10), true)
	f.Add("", "198.18.0.1/33", "SCTP", int32(0), int32(-1), false)
	f.Add("::/0,", " 192.0.2.0/24", "TCP", int32(1), int32(86401), true)
	f.Fuzz(func(t *testing.T, rangesAnnotation, rangesSpec, protocol string, nodePort, affinityTimeout int32, affinity bool) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: map[string]string{
				corev1.AnnotationLoadBalancerSourceRangesKey: rangesAnnotation,
			}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort, Protocol: corev1.Protocol(protocol)}}},
		}
		if rangesSpec != "" {
			svc.Spec.LoadBalancerSourceRanges = strings.Split(rangesSpec, ",")
		}
		if affinity {
			svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(affinityTimeout)}}
		}
		for _, needNodePorts := range []bool{true, false} { // the proxy and nodes data planes
			if _, err := configFor(svc, needNodePorts); err != nil && provider.Reason(err) == "" {
				t.Fatalf("error without a reason for the Service's Event: %v", err)
			}
		}
	})
}
