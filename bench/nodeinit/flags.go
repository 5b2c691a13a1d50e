package main

import (
	"context"
	"io"
	"os"
	"path/filepath"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
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

// servePlugin serves the sim provider (configured by simConfig) as a plugin
// on a unix socket until ctx ends, and returns a grpc cloud-config for it.
func servePlugin(ctx context.Context, simConfig string) (string, error) {
	f, err := os.Open(simConfig)
	if err != nil {
		return "", err
	}
	defer f.Close()
	p, err := sim.New(f)
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(simConfig)
	endpoint := "unix://" + filepath.Join(dir, "plugin.sock")
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		return "", err
	}
	go func() { _ = plugin.Serve(ctx, ln, p, plugin.Info{}) }()
	cfg := filepath.Join(dir, "grpc.yaml")
	return cfg, os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600)
}
