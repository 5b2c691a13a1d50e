package benchenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// ServePlugin builds a provider with newProvider from the cloud-config at
// config, serves it as a plugin (the Go SDK, plugin.Serve) on a unix
// socket beside that file until ctx ends, and returns the path of the grpc
// provider's cloud-config for it.
func ServePlugin(ctx context.Context, config string, newProvider cloudprovider.Factory) (string, error) {
	f, err := os.Open(config)
	if err != nil {
		return "", err
	}
	defer f.Close()
	p, err := newProvider(f)
	if err != nil {
		return "", fmt.Errorf("building the provider to serve as a plugin: %w", err)
	}
	dir := filepath.Dir(config)
	endpoint := "unix://" + filepath.Join(dir, "plugin.sock")
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		return "", fmt.Errorf("serving the provider as a plugin: %w", err)
	}
	go func() { _ = plugin.Serve(ctx, ln, p, plugin.Info{}) }()
	cfg := filepath.Join(dir, "grpc.yaml")
	return cfg, os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600)
}
