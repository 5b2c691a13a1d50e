// Package providertest holds provider doubles for the corners of the
// k8s.io/cloud-provider contract that the fake provider does not play.
package providertest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
)

// NameOnly is a provider with only the v1 Instances interface (and Zones)
// that has no instance IDs: InstanceID and every by-provider-ID call answer
// NotImplemented, every by-node-name call answers from the fake.
type NameOnly struct{ *fake.Cloud }

func (c NameOnly) Instances() (cloudprovider.Instances, bool) { return c, true }
func (c NameOnly) Zones() (cloudprovider.Zones, bool)         { return c, true }
func (NameOnly) InstanceID(context.Context, types.NodeName) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (NameOnly) NodeAddressesByProviderID(context.Context, string) ([]corev1.NodeAddress, error) {
	return nil, cloudprovider.NotImplemented
}
func (NameOnly) InstanceTypeByProviderID(context.Context, string) (string, error) {
	return "", cloudprovider.NotImplemented
}
func (NameOnly) GetZoneByProviderID(context.Context, string) (cloudprovider.Zone, error) {
	return cloudprovider.Zone{}, cloudprovider.NotImplemented
}
func (NameOnly) InstanceShutdownByProviderID(context.Context, string) (bool, error) {
	return false, cloudprovider.NotImplemented
}
