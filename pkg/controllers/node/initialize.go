package node

import (
	"fmt"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	cloudnodehelpers "k8s.io/cloud-provider/node/helpers"
)

// Label keys upstream sets from instance metadata. The beta and
// failure-domain keys are deprecated but still set by upstream, and workloads
// still select on them.
const (
	labelInstanceType       = corev1.LabelInstanceTypeStable // node.kubernetes.io/instance-type
	labelInstanceTypeBeta   = corev1.LabelInstanceType       // beta.kubernetes.io/instance-type
	labelZone               = corev1.LabelTopologyZone       // topology.kubernetes.io/zone
	labelZoneFailureDomain  = corev1.LabelFailureDomainBetaZone
	labelRegion             = corev1.LabelTopologyRegion
	labelRegionFailureDomai = corev1.LabelFailureDomainBetaRegion
)

// k8sNamespace matches label keys in the kubernetes.io and k8s.io namespaces
// (and their subdomains), which a provider's additional labels may not set.
var k8sNamespace = regexp.MustCompile(`(^|\.)(kubernetes|k8s)\.io/`)

// isUninitialized reports whether the node carries the taint kubelet sets
// with --cloud-provider=external.
func isUninitialized(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == cloudproviderapi.TaintExternalCloudProvider
	})
}

// initialized returns a copy of node with what the cloud says about it
// applied and the uninitialized taint removed. skipped lists additional labels
// it refused, with why, for the caller to log.
func initialized(node *corev1.Node, md *cloudprovider.InstanceMetadata) (out *corev1.Node, skipped []string) {
	out = node.DeepCopy()
	if out.Spec.ProviderID == "" && md.ProviderID != "" {
		out.Spec.ProviderID = md.ProviderID
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if md.InstanceType != "" {
		out.Labels[labelInstanceType] = md.InstanceType
		out.Labels[labelInstanceTypeBeta] = md.InstanceType
	}
	if md.Zone != "" {
		out.Labels[labelZone] = md.Zone
		out.Labels[labelZoneFailureDomain] = md.Zone
	}
	if md.Region != "" {
		out.Labels[labelRegion] = md.Region
		out.Labels[labelRegionFailureDomai] = md.Region
	}
	for k, v := range md.AdditionalLabels {
		switch old, exists := out.Labels[k]; {
		case k8sNamespace.MatchString(k):
			skipped = append(skipped, fmt.Sprintf("%s: in a reserved kubernetes.io/k8s.io namespace", k))
		case exists && old != v:
			skipped = append(skipped, fmt.Sprintf("%s: node already has value %q", k, old))
		default:
			out.Labels[k] = v
		}
	}
	slices.Sort(skipped)
	out.Spec.Taints = slices.DeleteFunc(out.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == cloudproviderapi.TaintExternalCloudProvider
	})
	return out, skipped
}

// desiredAddresses is the address list the node should have given the
// cloud's answer, following upstream: the hostname address kubelet reported
// is kept when the cloud gives none, and a kubelet --node-ip (the
// provided-node-ip annotation, one IP or a dual-stack pair) picks which
// addresses of its type are kept, and must be among the cloud's. ok is false
// when the cloud returned no addresses, in which case the node's are left
// alone.
func desiredAddresses(node *corev1.Node, cloudAddrs []corev1.NodeAddress) (addrs []corev1.NodeAddress, ok bool, err error) {
	if len(cloudAddrs) == 0 {
		return nil, false, nil
	}
	addrs = slices.Clone(cloudAddrs)
	if !slices.ContainsFunc(addrs, func(a corev1.NodeAddress) bool { return a.Type == corev1.NodeHostName }) {
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeHostName {
				addrs = append(addrs, a)
			}
		}
	}
	if ip, set := node.Annotations[cloudproviderapi.AnnotationAlphaProvidedIPAddr]; set {
		addrs, err = cloudnodehelpers.GetNodeAddressesFromNodeIP(ip, addrs)
		if err != nil {
			return nil, false, fmt.Errorf("kubelet's --node-ip (annotation %s=%q) does not match the cloud's addresses %v: %w",
				cloudproviderapi.AnnotationAlphaProvidedIPAddr, ip, cloudAddrs, err)
		}
	}
	return addrs, true, nil
}

// addressesEqual compares address lists in order: order matters (the first
// InternalIP of each family is the node IP), and a list holding two addresses
// of one type (dual-stack) is equal to itself, which upstream's
// type-keyed comparison gets wrong.
func addressesEqual(a, b []corev1.NodeAddress) bool {
	return slices.Equal(a, b)
}
