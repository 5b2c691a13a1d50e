package service

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// specFingerprint covers exactly what upstream's needsUpdate compares, so a
// change to any of it (ports, source ranges, affinity and its timeout,
// loadBalancerIP, external IPs, traffic policy, health check port, the
// number of IP families, annotations, the UID) leads to an
// EnsureLoadBalancer, and nothing else does.
func specFingerprint(svc *corev1.Service) string {
	type port struct {
		Name        string
		Protocol    corev1.Protocol
		Port        int32
		NodePort    int32
		TargetPort  intstr.IntOrString
		AppProtocol *string
	}
	ports := make([]port, len(svc.Spec.Ports))
	for i, p := range svc.Spec.Ports {
		ports[i] = port{p.Name, p.Protocol, p.Port, p.NodePort, p.TargetPort, p.AppProtocol}
	}
	v := struct {
		UID                   types.UID
		Ports                 []port
		SourceRanges          []string
		SessionAffinity       corev1.ServiceAffinity
		SessionAffinityConfig *corev1.SessionAffinityConfig
		LoadBalancerIP        string
		ExternalIPs           []string
		ExternalTrafficPolicy corev1.ServiceExternalTrafficPolicy
		HealthCheckNodePort   int32
		// Only the count: a family can be added or removed, never changed.
		IPFamilies  int
		Annotations map[string]string
	}{
		svc.UID, ports, svc.Spec.LoadBalancerSourceRanges, svc.Spec.SessionAffinity,
		svc.Spec.SessionAffinityConfig, svc.Spec.LoadBalancerIP, svc.Spec.ExternalIPs,
		svc.Spec.ExternalTrafficPolicy, svc.Spec.HealthCheckNodePort, len(svc.Spec.IPFamilies),
		svc.Annotations,
	}
	b, _ := json.Marshal(v) // plain structs, maps and slices: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
