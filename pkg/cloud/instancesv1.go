package cloud

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

func (v instancesV1) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	id, err := v.providerID(ctx, node)
	if err != nil {
		return false, err
	}
	return v.instances.InstanceShutdownByProviderID(ctx, id)
}

func (v instancesV1) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	id, err := v.providerID(ctx, node)
	if err != nil {
		return nil, err
	}
	md := &cloudprovider.InstanceMetadata{ProviderID: id}
	if md.InstanceType, err = v.instances.InstanceTypeByProviderID(ctx, md.ProviderID); err != nil {
		if md.InstanceType, err = v.instances.InstanceType(ctx, types.NodeName(node.Name)); err != nil {
			return nil, fmt.Errorf("instance type of node %s: %w", node.Name, err)
		}
	}
	if md.NodeAddresses, err = v.instances.NodeAddressesByProviderID(ctx, md.ProviderID); err != nil {
		if md.NodeAddresses, err = v.instances.NodeAddresses(ctx, types.NodeName(node.Name)); err != nil {
			return nil, fmt.Errorf("addresses of node %s: %w", node.Name, err)
		}
	}
	if v.zones != nil {
		zone, err := v.zones.GetZoneByProviderID(ctx, md.ProviderID)
		if err != nil {
			if zone, err = v.zones.GetZoneByNodeName(ctx, types.NodeName(node.Name)); err != nil {
				return nil, fmt.Errorf("zone of node %s: %w", node.Name, err)
			}
		}
		md.Zone, md.Region = zone.FailureDomain, zone.Region
	}
	return md, nil
}
