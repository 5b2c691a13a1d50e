package benchenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// ServePlugin serves p as a plugin (the Go SDK, plugin.Serve) on a unix
// socket in dir until ctx ends, and returns the path of the grpc
// provider's cloud-config for it.
func ServePlugin(ctx context.Context, p cloudprovider.Interface, dir string) (string, error) {
	endpoint := "unix://" + filepath.Join(dir, "plugin.sock")
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		return "", fmt.Errorf("serving the provider as a plugin: %w", err)
	}
	go func() { _ = plugin.Serve(ctx, ln, p, plugin.Info{}) }()
	cfg := filepath.Join(dir, "grpc.yaml")
	return cfg, os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600)
}
