package sim

import (
	"context"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

// AnnotationIdleTimeout sets the load balancer's idle timeout in seconds
// (1 to 3600).
const AnnotationIdleTimeout = "sim.outrigger.io/idle-timeout-seconds"

// LoadBalancer implements cloudprovider.Interface.
func (p *Provider) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return p, true }

var _ cloudprovider.LoadBalancer = (*Provider)(nil)

// GetLoadBalancerName is the upstream default ("a" + the Service UID), so a
// cluster moving between CCMs finds its load balancers under the same names.
func (p *Provider) GetLoadBalancerName(_ context.Context, _ string, service *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(service)
}

// GetLoadBalancer implements cloudprovider.LoadBalancer.
func (p *Provider) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := p.client.GetLoadBalancer(ctx, p.GetLoadBalancerName(ctx, clusterName, service))
	if simcloud.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lbStatus(lb), true, nil
}

// EnsureLoadBalancer creates or updates the load balancer to match service.
func (p *Provider) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	spec, err := lbSpec(clusterName, service, nodes)
	if err != nil {
		return nil, err
	}
	lb, err := p.client.PutLoadBalancer(ctx, p.GetLoadBalancerName(ctx, clusterName, service), spec)
	if err != nil {
		return nil, classify(err)
	}
	return lbStatus(lb), nil
}

// UpdateLoadBalancer replaces the backends only: one small call per Service
// when nodes come and go.
func (p *Provider) UpdateLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) error {
	return classify(p.client.SetBackends(ctx, p.GetLoadBalancerName(ctx, clusterName, service), backends(nodes)))
}

// EnsureLoadBalancerDeleted deletes the load balancer; a missing one is
// already deleted.
func (p *Provider) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	err := p.client.DeleteLoadBalancer(ctx, p.GetLoadBalancerName(ctx, clusterName, service))
	if simcloud.IsNotFound(err) {
		return nil
	}
	return err
}

func classify(err error) error {
	switch simcloud.APIErrorCode(err) {
	case "QuotaExceeded":
		return provider.WithReason(provider.ReasonQuotaExceeded, err)
	case "IPNotAvailable":
		return provider.WithReason("LoadBalancerIPNotAvailable", err)
	case "BadRequest":
		return provider.WithReason(provider.ReasonInvalidSpec, err)
	}
	return err
}

func lbStatus(lb simcloud.LoadBalancer) *corev1.LoadBalancerStatus {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{
		IP:     lb.VIP,
		IPMode: ptr.To(corev1.LoadBalancerIPModeVIP),
	}}}
}

func lbSpec(clusterName string, service *corev1.Service, nodes []*corev1.Node) (simcloud.LoadBalancerSpec, error) {
	spec := simcloud.LoadBalancerSpec{
		Tags:            map[string]string{"cluster": clusterName, "service": service.Namespace + "/" + service.Name},
		RequestedIP:     service.Spec.LoadBalancerIP,
		Backends:        backends(nodes),
		SessionAffinity: string(service.Spec.SessionAffinity),
	}
	for _, port := range service.Spec.Ports {
		spec.Listeners = append(spec.Listeners, simcloud.Listener{Protocol: string(port.Protocol), Port: port.Port, NodePort: port.NodePort})
	}
	ranges, err := servicehelpers.GetLoadBalancerSourceRanges(service)
	if err != nil {
		return spec, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s: %v", corev1.AnnotationLoadBalancerSourceRangesKey, err)
	}
	if !servicehelpers.IsAllowAll(ranges) {
		spec.SourceRanges = ranges.StringSlice()
	}
	if servicehelpers.RequestsOnlyLocalTraffic(service) {
		spec.HealthCheckPort = service.Spec.HealthCheckNodePort
	}
	if v, ok := service.Annotations[AnnotationIdleTimeout]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			return spec, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s=%q: want whole seconds from 1 to 3600", AnnotationIdleTimeout, v)
		}
		spec.IdleTimeoutSeconds = n
	}
	return spec, nil
}

// backends are the nodes' first InternalIPs, in the order given.
func backends(nodes []*corev1.Node) []simcloud.Backend {
	out := make([]simcloud.Backend, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, simcloud.Backend{Node: n.Name, Address: nodeInternalIP(n)})
	}
	return out
}

func nodeInternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
