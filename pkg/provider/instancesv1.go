package provider

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

// instancesV1 presents a provider that only offers the older
// cloudprovider.Instances (and Zones) interface as InstancesV2, making the
// same calls upstream's controllers make for such providers, so older
// providers link in unchanged.
type instancesV1 struct {
	provider  cloudprovider.Interface
	instances cloudprovider.Instances
	zones     cloudprovider.Zones // nil when the provider has none
}

var _ cloudprovider.InstancesV2 = instancesV1{}

// InstancesV2 returns the provider's InstancesV2, or, for a provider with
// only the older Instances (and Zones) interface, an adapter that presents it
// as InstancesV2. It reports false when the provider has neither.
func InstancesV2(p cloudprovider.Interface) (cloudprovider.InstancesV2, bool) {
	if v2, ok := p.InstancesV2(); ok && v2 != nil {
		return v2, true
	}
	v1, ok := p.Instances()
	if !ok || v1 == nil {
		return nil, false
	}
	zones, ok := p.Zones()
	if !ok {
		zones = nil
	}
	return instancesV1{provider: p, instances: v1, zones: zones}, true
}

// ProviderIDOptional reports whether instances (from InstancesV2) may leave a
// node without a provider ID. Upstream's cloud-node-controller refuses to
// initialize a node without one, except for a provider with only the older
// Instances interface, whose InstanceID may be NotImplemented: such a node is
// found by name and initialized with an empty provider ID.
func ProviderIDOptional(instances cloudprovider.InstancesV2) bool {
	_, v1 := instances.(instancesV1)
	return v1
}

// providerID is the node's, or "<provider>://<instance ID>" for its name, as
// upstream builds it.
func (v instancesV1) providerID(ctx context.Context, node *corev1.Node) (string, error) {
	if node.Spec.ProviderID != "" {
		return node.Spec.ProviderID, nil
	}
	return cloudprovider.GetInstanceProviderID(ctx, v.provider, types.NodeName(node.Name))
}

func (v instancesV1) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	id, err := v.providerID(ctx, node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return v.instances.InstanceExistsByProviderID(ctx, id)
}

// InstanceShutdown answers "not shut down" when the provider cannot tell
// (NotImplemented) or no longer knows the node, as upstream's lifecycle
// controller does for such providers: the shutdown taint is an optimization,
// and a missing instance is InstanceExists's business.
func (v instancesV1) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	id, err := v.providerID(ctx, node)
	if errors.Is(err, cloudprovider.InstanceNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	shutdown, err := v.instances.InstanceShutdownByProviderID(ctx, id)
	if errors.Is(err, cloudprovider.NotImplemented) {
		return false, nil
	}
	return shutdown, err
}

// InstanceMetadata asks by provider ID first and by node name when that
// fails. A provider whose InstanceID is NotImplemented has no provider IDs:
// the node is then looked up by name only and the metadata's ProviderID is
// empty, as upstream initializes such nodes.
func (v instancesV1) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	id, err := v.providerID(ctx, node)
	if err != nil && !errors.Is(err, cloudprovider.NotImplemented) {
		return nil, err
	}
	name := types.NodeName(node.Name)
	md := &cloudprovider.InstanceMetadata{ProviderID: id}
	if md.NodeAddresses, err = v.instances.NodeAddressesByProviderID(ctx, id); err != nil {
		byID := err
		if md.NodeAddresses, err = v.instances.NodeAddresses(ctx, name); err != nil {
			return nil, fmt.Errorf("addresses of node %s: by provider ID %q: %v; by name: %w", node.Name, id, byID, err)
		}
	}
	if md.InstanceType, err = v.instances.InstanceTypeByProviderID(ctx, id); err != nil {
		byID := err
		if md.InstanceType, err = v.instances.InstanceType(ctx, name); err != nil {
			return nil, fmt.Errorf("instance type of node %s: by provider ID %q: %v; by name: %w", node.Name, id, byID, err)
		}
	}
	if v.zones != nil {
		zone, err := v.zones.GetZoneByProviderID(ctx, id)
		if err != nil {
			byID := err
			if zone, err = v.zones.GetZoneByNodeName(ctx, name); err != nil {
				return nil, fmt.Errorf("zone of node %s: by provider ID %q: %v; by name: %w", node.Name, id, byID, err)
			}
		}
		md.Zone, md.Region = zone.FailureDomain, zone.Region
	}
	return md, nil
}
