package sim

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simapi"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// AnnotationIdleTimeout sets the load balancer's idle timeout in seconds
// (1 to 3600).
const AnnotationIdleTimeout = "sim.outrigger.dev/idle-timeout-seconds"

// AnnotationIdleTimeoutDeprecated is AnnotationIdleTimeout's name in
// earlier releases, still read where the new one is absent so that a
// Service written for them keeps its load balancer's setting.
const AnnotationIdleTimeoutDeprecated = "sim.outrigger.io/idle-timeout-seconds"

// LoadBalancer implements cloudprovider.Interface.
func (p *Provider) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return p, true }

var (
	_ cloudprovider.LoadBalancer     = (*Provider)(nil)
	_ provider.LoadBalancerOwnership = (*Provider)(nil)
)

// The tags that record, on every load balancer, what it was made for. The
// cloud checks them in the same request that changes the load balancer
// (simapi.IfTagsHeader), so the provider changes only what it can prove
// it made: for this cluster, this Service object, and, for anything but a
// deletion, this Service's class. Two CCMs on one cloud (two clusters, or
// two classes in one cluster) never change each other's load balancers.
const (
	TagCluster = "cluster"
	// TagClusterID is the cluster's identity (provider.ClusterIdentity):
	// unlike the name, no two clusters share it.
	TagClusterID  = "cluster-id"
	TagServiceUID = "service-uid"
	TagClass      = "load-balancer-class"
	// TagService is namespace/name, for operators.
	TagService = "service"
)

// ownerTags are the tags that prove a load balancer is the one made for
// service by clusterName; withClass adds the Service's class.
func ownerTags(clusterName string, service *corev1.Service, withClass bool) map[string]string {
	m := map[string]string{TagCluster: clusterName, TagServiceUID: string(service.UID)}
	if withClass {
		m[TagClass] = ptr.Deref(service.Spec.LoadBalancerClass, "")
	}
	return m
}

// LoadBalancerOwner implements provider.LoadBalancerOwnership from the
// load balancer's tags.
func (p *Provider) LoadBalancerOwner(ctx context.Context, clusterName string, service *corev1.Service) (provider.LoadBalancerOwner, bool, error) {
	lb, err := p.client.GetLoadBalancer(ctx, p.GetLoadBalancerName(ctx, clusterName, service))
	if simapi.IsCode(err, simapi.CodeLoadBalancerNotFound) {
		return provider.LoadBalancerOwner{}, false, nil
	}
	if err != nil {
		return provider.LoadBalancerOwner{}, false, err
	}
	return provider.LoadBalancerOwner{
		ClusterName: lb.Tags[TagCluster],
		ClusterID:   lb.Tags[TagClusterID],
		ServiceUID:  types.UID(lb.Tags[TagServiceUID]),
		Class:       lb.Tags[TagClass],
	}, true, nil
}

// GetLoadBalancerName is the upstream default ("a" + the Service UID), so a
// cluster moving between CCMs finds its load balancers under the same names.
func (p *Provider) GetLoadBalancerName(_ context.Context, _ string, service *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(service)
}

// ListLoadBalancerOwners implements provider.LoadBalancerOwnership: the
// load balancers tagged with clusterName and a Service UID, with the
// cluster identity each carries (Outrigger deletes only those of its own).
func (p *Provider) ListLoadBalancerOwners(ctx context.Context, clusterName string) ([]provider.OwnedLoadBalancer, error) {
	all, err := p.client.LoadBalancers(ctx)
	if err != nil {
		return nil, err
	}
	var out []provider.OwnedLoadBalancer
	for _, lb := range all {
		if lb.Tags[TagCluster] != clusterName || lb.Tags[TagServiceUID] == "" {
			continue
		}
		ns, name, _ := strings.Cut(lb.Tags[TagService], "/")
		out = append(out, provider.OwnedLoadBalancer{
			Name: lb.Name,
			LoadBalancerOwner: provider.LoadBalancerOwner{
				ClusterName: clusterName, ClusterID: lb.Tags[TagClusterID],
				ServiceUID: types.UID(lb.Tags[TagServiceUID]), Class: lb.Tags[TagClass],
			},
			ServiceNamespace: ns, ServiceName: name,
		})
	}
	return out, nil
}

// GetLoadBalancer implements cloudprovider.LoadBalancer. A load balancer
// under the Service's name made for another cluster or another Service
// object is not this Service's: it does not exist for the caller.
func (p *Provider) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := p.client.GetLoadBalancer(ctx, p.GetLoadBalancerName(ctx, clusterName, service))
	if simapi.IsCode(err, simapi.CodeLoadBalancerNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if lb.Tags[TagCluster] != clusterName || lb.Tags[TagServiceUID] != string(service.UID) || !p.sameCluster(lb.Tags) {
		return nil, false, nil
	}
	return lbStatus(lb), true, nil
}

// EnsureLoadBalancer creates or updates the load balancer to match service.
func (p *Provider) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	spec, err := lbSpec(clusterName, service, nodes)
	if err != nil {
		return nil, err
	}
	name := p.GetLoadBalancerName(ctx, clusterName, service)
	var lb simapi.LoadBalancer
	err = p.owned(ctx, name, ownerTags(clusterName, service, true), func(match map[string]string) (err error) {
		// A new load balancer records this cluster's identity; one made
		// before keeps its record as it is (the Service's UID proves it
		// this Service's): an ensure of it stays a no-op.
		s := spec
		if id := match[TagClusterID]; id != "" {
			s.Tags = maps.Clone(spec.Tags)
			s.Tags[TagClusterID] = id
		}
		lb, err = p.client.PutLoadBalancer(ctx, name, s, match)
		return err
	})
	if err != nil {
		return nil, classify(err)
	}
	return lbStatus(lb), nil
}

// sameCluster reports whether tags carry this cluster's identity, or none
// (a record made before the identity, or before Outrigger set it).
func (p *Provider) sameCluster(tags map[string]string) bool {
	id, mine := tags[TagClusterID], p.clusterIdentity()
	return id == "" || mine == "" || id == mine
}

// owned runs change on the load balancer name, conditional on match and on
// this cluster's identity, both checked by the cloud in the same request.
// A load balancer made before it carried an identity (cluster name and
// Service UID only, say by the upstream CCM before a switch) is this
// Service's all the same, as the UID proves: on a mismatch, change runs
// once more, conditional on the load balancer still carrying no identity,
// and leaves its record as it is. One made by another cluster is never
// changed.
func (p *Provider) owned(ctx context.Context, name string, match map[string]string, change func(match map[string]string) error) error {
	id := p.clusterIdentity()
	if id == "" {
		return change(match)
	}
	m := maps.Clone(match)
	m[TagClusterID] = id
	err := change(m)
	if !simapi.IsCode(err, simapi.CodeTagsMismatch) {
		return err
	}
	lb, gerr := p.client.GetLoadBalancer(ctx, name)
	if gerr != nil || lb.Tags[TagClusterID] != "" {
		return err
	}
	m[TagClusterID] = ""
	return change(m)
}

// UpdateLoadBalancer replaces the backends only: one small call per Service
// when nodes come and go.
func (p *Provider) UpdateLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) error {
	name := p.GetLoadBalancerName(ctx, clusterName, service)
	return classify(p.owned(ctx, name, ownerTags(clusterName, service, true), func(match map[string]string) error {
		return p.client.SetBackends(ctx, name, backends(nodes), match)
	}))
}

// EnsureLoadBalancerDeleted deletes the load balancer made for this
// cluster and Service object (whatever its class: a Service whose class
// moved away is cleaned up under its new class). A missing one, or one
// made for another cluster or Service, is not there for this Service.
func (p *Provider) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	name := p.GetLoadBalancerName(ctx, clusterName, service)
	err := p.owned(ctx, name, ownerTags(clusterName, service, false), func(match map[string]string) error {
		return p.client.DeleteLoadBalancer(ctx, name, match)
	})
	if simapi.IsCode(err, simapi.CodeLoadBalancerNotFound) || simapi.IsCode(err, simapi.CodeTagsMismatch) {
		return nil
	}
	return err
}

// ReasonNotOwned is the reason of an ensure refused because the load
// balancer under the Service's name was made for another cluster, Service
// object or class.
const ReasonNotOwned = "LoadBalancerNotOwned"

func classify(err error) error {
	switch simapi.APIErrorCode(err) {
	case simapi.CodeTagsMismatch:
		return provider.WithReason(ReasonNotOwned, fmt.Errorf("the load balancer under this Service's name is not this Service's to change (left alone): %w", err))
	case "QuotaExceeded":
		return provider.WithReason(provider.ReasonQuotaExceeded, err)
	case "IPNotAvailable":
		return provider.WithReason("LoadBalancerIPNotAvailable", err)
	case "BadRequest":
		return provider.WithReason(provider.ReasonInvalidSpec, err)
	}
	return err
}

func lbStatus(lb simapi.LoadBalancer) *corev1.LoadBalancerStatus {
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{
		IP:     lb.VIP,
		IPMode: ptr.To(corev1.LoadBalancerIPModeVIP),
	}}}
}

func lbSpec(clusterName string, service *corev1.Service, nodes []*corev1.Node) (simapi.LoadBalancerSpec, error) {
	spec := simapi.LoadBalancerSpec{
		Tags:            ownerTags(clusterName, service, true),
		RequestedIP:     service.Spec.LoadBalancerIP,
		Backends:        backends(nodes),
		SessionAffinity: string(service.Spec.SessionAffinity),
	}
	spec.Tags[TagService] = service.Namespace + "/" + service.Name
	for _, port := range service.Spec.Ports {
		spec.Listeners = append(spec.Listeners, simapi.Listener{Protocol: string(port.Protocol), Port: port.Port, NodePort: port.NodePort})
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
	name := AnnotationIdleTimeout
	v, ok := service.Annotations[name]
	if !ok {
		name = AnnotationIdleTimeoutDeprecated
		v, ok = service.Annotations[name]
	}
	if ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			return spec, provider.Reasonf(provider.ReasonInvalidAnnotation, "annotation %s=%q: want whole seconds from 1 to 3600", name, v)
		}
		spec.IdleTimeoutSeconds = n
	}
	return spec, nil
}

// backends are the nodes' first InternalIPs, in the order given.
func backends(nodes []*corev1.Node) []simapi.Backend {
	out := make([]simapi.Backend, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, simapi.Backend{Node: n.Name, Address: nodeInternalIP(n)})
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
