package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// specFingerprint covers everything in a Service a load balancer is built
// from, so that a change to any of it (ports, source ranges, affinity,
// loadBalancerIP, traffic policy, health check port, IP families,
// annotations) leads to an EnsureLoadBalancer, and nothing else does.
func specFingerprint(svc *corev1.Service) string {
	v := struct {
		UID                      types.UID
		Ports                    []corev1.ServicePort
		SourceRanges             []string
		SessionAffinity          corev1.ServiceAffinity
		SessionAffinityConfig    *corev1.SessionAffinityConfig
		LoadBalancerIP           string
		ExternalIPs              []string
		ExternalTrafficPolicy    corev1.ServiceExternalTrafficPolicy
		HealthCheckNodePort      int32
		IPFamilies               []corev1.IPFamily
		IPFamilyPolicy           *corev1.IPFamilyPolicy
		AllocateLoadBalancerNode *bool
		Annotations              map[string]string
	}{
		svc.UID, svc.Spec.Ports, svc.Spec.LoadBalancerSourceRanges, svc.Spec.SessionAffinity,
		svc.Spec.SessionAffinityConfig, svc.Spec.LoadBalancerIP, svc.Spec.ExternalIPs,
		svc.Spec.ExternalTrafficPolicy, svc.Spec.HealthCheckNodePort, svc.Spec.IPFamilies,
		svc.Spec.IPFamilyPolicy, svc.Spec.AllocateLoadBalancerNodePorts, svc.Annotations,
	}
	b, _ := json.Marshal(v) // plain structs, maps and slices: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
