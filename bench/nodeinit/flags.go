package main

import (
	"io"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/providers/sim"
)

// withoutBatch builds the sim provider with only the standard InstancesV2
// methods visible, as most providers are today.
func withoutBatch(config io.Reader) (cloudprovider.Interface, error) {
	p, err := sim.New(config)
	if err != nil {
		return nil, err
	}
	return plain{p}, nil
}

type plain struct{ cloudprovider.Interface }

type instancesOnly struct{ cloudprovider.InstancesV2 }

func (p plain) InstancesV2() (cloudprovider.InstancesV2, bool) {
	v2, ok := p.Interface.InstancesV2()
	return instancesOnly{v2}, ok
}
