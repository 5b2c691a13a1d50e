package node

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	cloudnodehelpers "k8s.io/cloud-provider/node/helpers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/outrigger-ccm/outrigger/internal/apilimits"
)

// Label keys upstream sets from instance metadata. The beta and
// failure-domain keys are deprecated but still set by upstream, and workloads
// still select on them.
const (
	labelInstanceType        = corev1.LabelInstanceTypeStable // node.kubernetes.io/instance-type
	labelInstanceTypeBeta    = corev1.LabelInstanceType       // beta.kubernetes.io/instance-type
	labelZone                = corev1.LabelTopologyZone       // topology.kubernetes.io/zone
	labelZoneFailureDomain   = corev1.LabelFailureDomainBetaZone
	labelRegion              = corev1.LabelTopologyRegion
	labelRegionFailureDomain = corev1.LabelFailureDomainBetaRegion
)

// betaToGA pairs each beta topology label with its GA label: on an
// initialized node the GA label takes the beta one's value when it is
// missing or differs, as upstream reconciles them.
var betaToGA = []struct{ beta, ga string }{
	{labelZoneFailureDomain, labelZone},
	{labelRegionFailureDomain, labelRegion},
	{labelInstanceTypeBeta, labelInstanceType},
}

// labelsToReconcile returns the GA labels the node should get, or nil.
func labelsToReconcile(node *corev1.Node) map[string]string {
	var out map[string]string
	for _, p := range betaToGA {
		beta, ok := node.Labels[p.beta]
		if !ok {
			continue
		}
		if ga, ok := node.Labels[p.ga]; !ok || ga != beta {
			if out == nil {
				out = map[string]string{}
			}
			out[p.ga] = beta
		}
	}
	return out
}

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
// applied and the uninitialized taint removed. skipped lists labels it
// refused, with why, for the caller to log and record.
func initialized(node *corev1.Node, md *cloudprovider.InstanceMetadata) (out *corev1.Node, skipped []string) {
	out = node.DeepCopy()
	if out.Spec.ProviderID == "" && md.ProviderID != "" {
		out.Spec.ProviderID = md.ProviderID
	}
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	// A label the API refuses would fail the whole patch, and the node
	// would keep its taint for ever: it is left off, never cut (a zone
	// name cut short names another zone).
	set := func(value string, keys ...string) {
		if value == "" {
			return
		}
		if v := apilimits.Label(keys[0], value); v != nil {
			skipped = append(skipped, v.String())
			return
		}
		for _, k := range keys {
			out.Labels[k] = value
		}
	}
	set(md.InstanceType, labelInstanceType, labelInstanceTypeBeta)
	set(md.Zone, labelZone, labelZoneFailureDomain)
	set(md.Region, labelRegion, labelRegionFailureDomain)
	for k, v := range md.AdditionalLabels {
		switch old, exists := out.Labels[k]; {
		case apilimits.Label(k, v) != nil:
			skipped = append(skipped, apilimits.Label(k, v).String())
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
//
// Addresses the API or its readers do not take (apilimits.NodeAddresses)
// are left out first, and returned in refused: one would fail the whole
// patch, leaving the node without any of the cloud's addresses.
func desiredAddresses(node *corev1.Node, cloudAddrs []corev1.NodeAddress) (addrs []corev1.NodeAddress, refused []apilimits.Violation, ok bool, err error) {
	cloudAddrs, refused = apilimits.NodeAddresses(cloudAddrs)
	if len(cloudAddrs) == 0 {
		return nil, refused, false, nil
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
			return nil, refused, false, fmt.Errorf("kubelet's --node-ip (annotation %s=%q) does not match the cloud's addresses %v: %w",
				cloudproviderapi.AnnotationAlphaProvidedIPAddr, ip, cloudAddrs, err)
		}
	}
	return addrs, refused, true, nil
}

// addressesEqual compares address lists in order: order matters (the first
// InternalIP of each family is the node IP), and a list holding two addresses
// of one type (dual-stack) is equal to itself, which upstream's
// type-keyed comparison gets wrong.
func addressesEqual(a, b []corev1.NodeAddress) bool {
	return slices.Equal(a, b)
}

// initializationPatch is a JSON patch from node to updated that removes the
// uninitialized taint only if it is still where it was read (a "test"
// operation), adds the labels and sets the providerID. Unlike a patch locked
// on the resourceVersion, it does not fail because someone else changed an
// unrelated field meanwhile (pod CIDRs, annotations); unlike a merge patch of
// the taint list, it cannot drop a taint added meanwhile. providerID needs no
// test: the API server refuses to change it once set.
func initializationPatch(node, updated *corev1.Node) (client.Patch, error) {
	var ops []map[string]any
	if node.Spec.ProviderID != updated.Spec.ProviderID {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/providerID", "value": updated.Spec.ProviderID})
	}
	if node.Labels == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels", "value": updated.Labels})
	} else {
		keys := make([]string, 0, len(updated.Labels))
		for k := range updated.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if old, ok := node.Labels[k]; !ok || old != updated.Labels[k] {
				ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + jsonPointerEscape(k), "value": updated.Labels[k]})
			}
		}
	}
	// Remove from the end, so earlier indexes stay valid.
	for i := len(node.Spec.Taints) - 1; i >= 0; i-- {
		if node.Spec.Taints[i].Key != cloudproviderapi.TaintExternalCloudProvider {
			continue
		}
		path := fmt.Sprintf("/spec/taints/%d", i)
		ops = append(ops,
			map[string]any{"op": "test", "path": path + "/key", "value": cloudproviderapi.TaintExternalCloudProvider},
			map[string]any{"op": "remove", "path": path})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("encoding the initialization patch of node %s: %w", node.Name, err)
	}
	return client.RawPatch(types.JSONPatchType, data), nil
}

// jsonPointerEscape escapes a label key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
