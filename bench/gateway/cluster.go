package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// runOnCluster measures route changes on the real cluster (real kubelets,
// kube-proxy, data plane pods watching their programming), which the
// cluster package's TestGatewayRouteChangesAtScale does: -gateways
// Gateways with -routes HTTPRoutes, -changes of them changed at -rate a
// second while -rps requests a second flow. It needs root and the images
// `make cluster-binaries cluster-images image` builds. The table is the
// test's report.
func runOnCluster(ctx context.Context, cfg config, rate, rps int) (string, error) {
	dir, err := os.MkdirTemp("", "bench-gateway-cluster-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "report.md")
	image, err := filepath.Abs("bin/outrigger-image.tar")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout=60m", "-run=^TestGatewayRouteChangesAtScale$", "./cluster/")
	cmd.Env = append(os.Environ(),
		"OUTRIGGER_CLUSTER=1",
		"OUTRIGGER_IMAGE="+image,
		"OUTRIGGER_ROUTE_SCALE_REPORT="+report,
		fmt.Sprintf("OUTRIGGER_ROUTE_SCALE=gateways=%d,routes=%d,rate=%d,changes=%d,rps=%d", cfg.gateways, cfg.routes, rate, cfg.changes, rps),
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("the real-cluster run: %w", err)
	}
	table, err := os.ReadFile(report)
	if err != nil {
		return "", err
	}
	return string(table), nil
}
