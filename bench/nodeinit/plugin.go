package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim"
)

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
