package main

import (
	"context"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// startCloud starts the cloud the run's provider talks to, with an
// instance for each of names, and writes the provider's cloud-config. counts
// reads the calls the cloud answered so far (refused ones included);
// setLimits applies the run's latency and rate limit, once the nodes are
// registered. The cloud stops with ctx.
func startCloud(ctx context.Context, cfg config, cloudConfig string, names []string) (counts func() simcloud.Calls, setLimits func(), err error) {
	if cfg.fake {
		stats, err := upstreamfake.WriteConfig(cloudConfig, upstreamfake.Config{Nodes: names, Latency: metav1.Duration{Duration: cfg.latency}, RateLimit: cfg.rateLimit})
		if err != nil {
			return nil, nil, err
		}
		read := upstreamfake.Counter(ctx, stats)
		counts = func() simcloud.Calls {
			c := read()
			return simcloud.Calls{Total: c.Total, Throttled: c.Throttled, ByOp: c.ByOp}
		}
		return counts, func() {}, nil
	}
	cloud := simcloud.New("")
	url, err := cloud.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(cloudConfig, []byte("endpoint: "+url+"\n"), 0o600); err != nil {
		return nil, nil, err
	}
	for _, name := range names {
		if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
			return nil, nil, fmt.Errorf("creating instance %s: %w", name, err)
		}
	}
	setLimits = func() {
		cloud.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: cfg.latency}, RateLimit: cfg.rateLimit})
	}
	return cloud.Calls, setLimits, nil
}
