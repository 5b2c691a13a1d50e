// Package testobj builds the API objects tests create, one way for every
// test package: a LoadBalancer Service with what the test cares about
// said by options, the rest left as the API would default it.
package testobj

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ServiceOption sets one part of a Service.
type ServiceOption func(*corev1.Service)

// LBService is a Service of type LoadBalancer, ns/name, with no port unless
// an option gives one.
func LBService(ns, name string, opts ...ServiceOption) *corev1.Service {
	s := &corev1.Service{}
	s.Namespace, s.Name = ns, name
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ports adds TCP ports, each named p<port> with the same target port.
func Ports(ports ...int32) ServiceOption {
	return func(s *corev1.Service) {
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Protocol: corev1.ProtocolTCP, Port: p, TargetPort: intstr.FromInt32(p)})
		}
	}
}

// Port adds one port as given.
func Port(p corev1.ServicePort) ServiceOption {
	return func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, p) }
}

// NodePort adds TCP port with its node port, as the API allocates one.
func NodePort(port, nodePort int32) ServiceOption {
	return Port(corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: port, NodePort: nodePort})
}

// Selector selects the pods labelled app=<the Service's name>.
func Selector() ServiceOption {
	return func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": s.Name} }
}

// Class sets spec.loadBalancerClass; nil leaves none.
func Class(class *string) ServiceOption {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = class }
}

// UID sets the Service's UID, as the API would.
func UID(uid string) ServiceOption {
	return func(s *corev1.Service) { s.UID = types.UID(uid) }
}

// TrafficPolicy sets spec.externalTrafficPolicy.
func TrafficPolicy(p corev1.ServiceExternalTrafficPolicy) ServiceOption {
	return func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = p }
}

// HealthCheckNodePort sets spec.healthCheckNodePort, as the API allocates
// one for a Local policy.
func HealthCheckNodePort(port int32) ServiceOption {
	return func(s *corev1.Service) { s.Spec.HealthCheckNodePort = port }
}

// Ingress sets status.loadBalancer.ingress to the IPs.
func Ingress(ips ...string) ServiceOption {
	return func(s *corev1.Service) {
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

// Mutate applies f, for what no option says.
func Mutate(f func(*corev1.Service)) ServiceOption { return ServiceOption(f) }
