package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

// startCloud starts the cloud the run's provider talks to, with an
// instance for each of names, and writes the provider's cloud-config. counts
// reads the calls the cloud answered so far (refused ones included);
// setLimits applies the run's latency and rate limit, once the nodes are
// registered. The cloud stops with ctx.
func startCloud(ctx context.Context, cfg config, cloudConfig string, names []string) (counts func() simcloud.Calls, setLimits func(), err error) {
	if cfg.fake {
		// The fake lives in the CCM's process; it serves its counts on
		// a loopback port chosen here.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		raw, err := yaml.Marshal(upstreamfake.Config{Nodes: names, Latency: metav1.Duration{Duration: cfg.latency}, RateLimit: cfg.rateLimit, Stats: addr})
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(cloudConfig, raw, 0o600); err != nil {
			return nil, nil, err
		}
		counts = func() simcloud.Calls {
			readCtx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			// Before the CCM built its provider, and after it stopped,
			// there is nothing to read: no calls.
			c, err := upstreamfake.Read(readCtx, addr)
			if err != nil {
				return simcloud.Calls{}
			}
			return simcloud.Calls(c)
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
