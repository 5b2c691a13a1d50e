package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
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
	return benchenv.ServePlugin(ctx, p, filepath.Dir(simConfig))
}
