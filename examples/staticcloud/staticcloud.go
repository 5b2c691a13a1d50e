// Package staticcloud is the example provider of docs/provider-guide.md: a
// "cloud" whose machines are listed in the cloud-config file, as a bare-metal
// fleet might be. It implements only what a provider must
// (cloudprovider.Interface with InstancesV2), in the standard interface, so
// it would run unchanged under the upstream cloud-controller-manager too.
package staticcloud

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/yaml"
)

// Name is the provider's --cloud-provider name.
const Name = "staticcloud"

// Machine is one entry of the cloud-config.
type Machine struct {
	Name         string   `json:"name"`
	InstanceType string   `json:"instanceType"`
	Zone         string   `json:"zone"`
	Region       string   `json:"region"`
	InternalIPs  []string `json:"internalIPs"`
	PoweredOff   bool     `json:"poweredOff,omitempty"`
}

// Config is the cloud-config file.
type Config struct {
	Machines []Machine `json:"machines"`
}

// New is the provider's factory.
func New(config io.Reader) (cloudprovider.Interface, error) {
	if config == nil {
		return nil, errors.New("staticcloud needs --cloud-config listing the machines")
	}
	data, err := io.ReadAll(config)
	if err != nil {
		return nil, fmt.Errorf("reading cloud-config: %w", err)
	}
	var cfg Config
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		return nil, fmt.Errorf("malformed cloud-config: %w", err)
	}
	c := &Cloud{machines: map[string]Machine{}}
	for _, m := range cfg.Machines {
		c.machines[m.Name] = m
	}
	return c, nil
}

// Cloud implements cloudprovider.Interface and cloudprovider.InstancesV2.
type Cloud struct {
	machines map[string]Machine
}

func (c *Cloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return nil, false }
func (c *Cloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return c, true }
func (c *Cloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *Cloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (c *Cloud) ProviderName() string                                              { return Name }
func (c *Cloud) HasClusterID() bool                                                { return true }

// InstanceExists reports whether the node's machine is listed.
func (c *Cloud) InstanceExists(_ context.Context, node *corev1.Node) (bool, error) {
	_, ok := c.machines[node.Name]
	return ok, nil
}

// InstanceShutdown reports whether the node's machine is powered off.
func (c *Cloud) InstanceShutdown(_ context.Context, node *corev1.Node) (bool, error) {
	return c.machines[node.Name].PoweredOff, nil
}

// InstanceMetadata describes the node's machine.
func (c *Cloud) InstanceMetadata(_ context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	m, ok := c.machines[node.Name]
	if !ok {
		return nil, cloudprovider.InstanceNotFound
	}
	md := &cloudprovider.InstanceMetadata{
		ProviderID:   Name + "://" + m.Name,
		InstanceType: m.InstanceType,
		Zone:         m.Zone,
		Region:       m.Region,
	}
	for _, ip := range m.InternalIPs {
		md.NodeAddresses = append(md.NodeAddresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return md, nil
}
