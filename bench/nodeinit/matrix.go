package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim"
)

// upstreamTuned are the upstream CCM's tuned node flags.
var upstreamTuned = benchenv.UpstreamTuned

// matrixConfig says which runs the side-by-side table has.
type matrixConfig struct {
	sizes     []int
	providers []string
	limits    []float64
	// upstream is the upstream CCM binary.
	upstream string
	// upstreamDefaultsMax is the largest node count the upstream CCM runs
	// with its own defaults (one node at a time).
	upstreamDefaultsMax int
	// ccms are the CCM variants run: outrigger, upstream-tuned,
	// upstream-defaults.
	ccms map[string]bool
}

func parseMatrix(sizes, providers, limits, ccms, upstream string, upstreamDefaultsMax int) (matrixConfig, error) {
	m := matrixConfig{upstream: upstream, upstreamDefaultsMax: upstreamDefaultsMax, ccms: map[string]bool{}}
	for _, c := range strings.Split(ccms, ",") {
		switch c = strings.TrimSpace(c); c {
		case "outrigger", "upstream-tuned", "upstream-defaults":
			m.ccms[c] = true
		default:
			return m, fmt.Errorf("bad -matrix-ccms entry %q: outrigger, upstream-tuned or upstream-defaults", c)
		}
	}
	if upstream == "" {
		return m, fmt.Errorf("-matrix needs -upstream, the upstream CCM binary (make bin/upstream-ccm)")
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return m, fmt.Errorf("bad -nodes entry %q", s)
		}
		m.sizes = append(m.sizes, n)
	}
	for _, p := range strings.Split(providers, ",") {
		if p = strings.TrimSpace(p); p != sim.ProviderName && p != upstreamfake.ProviderName {
			return m, fmt.Errorf("bad -matrix-providers entry %q: %s or %s", p, sim.ProviderName, upstreamfake.ProviderName)
		}
		m.providers = append(m.providers, strings.TrimSpace(p))
	}
	for _, l := range strings.Split(limits, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(l), 64)
		if err != nil || v < 0 {
			return m, fmt.Errorf("bad -matrix-limits entry %q: calls per second, 0 for none", l)
		}
		m.limits = append(m.limits, v)
	}
	return m, nil
}

// runMatrix runs the standard-provider comparison on one control plane and
// prints one table: first the API server's write limit for each node count,
// then for each provider (the sim provider with its batch lookup hidden, or
// upstream's fake), cloud limit and node count, Outrigger with its default
// flags, the upstream CCM tuned and, for small counts, the upstream CCM with
// its defaults.
func runMatrix(ctx context.Context, base config, m matrixConfig) error {
	e, stop, err := startEnv(ctx)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("Standard providers, side by side. Cloud: %s latency per call; 429 with a retry hint above its limit. Refresh period (--node-status-update-frequency) %s for both CCMs. Upstream tuned: %s.\n\n",
		base.latency, refresh, strings.Join(upstreamTuned, " "))
	fmt.Println("| cloud limit | provider | nodes | CCM and flags | seconds to all initialized | x the API server's write limit | seconds to the first | cloud calls | throttled (429) | most 429s in one second | API writes per node | idle cloud calls per refresh period | idle: busiest second / average second |")
	fmt.Println("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	limit := map[int]float64{}
	for _, n := range m.sizes {
		cfg := base
		cfg.apiLimit = true
		r, err := once(ctx, e.client, e.kubeconfig, e.dir, n, cfg)
		if err != nil {
			return fmt.Errorf("measuring the API server's write limit: %w", err)
		}
		limit[n] = r.seconds
		fmt.Printf("| | | %d | no CCM: the API server's write limit (two writes per node, no client-side limit) | %.1f | 1.00 | %.2f | | | | %.2f | | |\n", n, r.seconds, r.firstSeconds, float64(r.writes)/float64(n))
	}
	for _, provider := range m.providers {
		for _, l := range m.limits {
			for _, n := range m.sizes {
				type variant struct {
					name     string
					upstream string
					extra    []string
				}
				var variants []variant
				if m.ccms["outrigger"] {
					variants = append(variants, variant{name: "Outrigger, defaults"})
				}
				if m.ccms["upstream-tuned"] {
					variants = append(variants, variant{name: "upstream, tuned", upstream: m.upstream, extra: upstreamTuned})
				}
				if m.ccms["upstream-defaults"] && n <= m.upstreamDefaultsMax {
					variants = append(variants, variant{name: "upstream, defaults", upstream: m.upstream})
				}
				for _, v := range variants {
					cfg := base
					cfg.rateLimit = l
					cfg.fake = provider == upstreamfake.ProviderName
					cfg.noBatch = true
					cfg.upstream, cfg.extra = v.upstream, v.extra
					r, err := once(ctx, e.client, e.kubeconfig, e.dir, n, cfg)
					if err != nil {
						return fmt.Errorf("%s, %s, limit %.0f, %d nodes: %w", v.name, provider, l, n, err)
					}
					limitName := "none"
					if l > 0 {
						limitName = fmt.Sprintf("%.0f calls/s", l)
					}
					providerName := provider
					if provider == sim.ProviderName {
						providerName = "sim, no batch lookup"
					}
					fmt.Printf("| %s | %s | %d | %s | %.1f | %.2f | %.2f | %d | %d | %d | %.2f | %.1f | %d / %.1f |\n",
						limitName, providerName, n, v.name, r.seconds, r.seconds/limit[n], r.firstSeconds, r.calls.Total, r.calls.Throttled, r.peakThrottled,
						float64(r.writes)/float64(n), r.idleCallsPerPeriod, r.idlePeak, r.idleCallsPerPeriod/refresh.Seconds())
				}
			}
		}
	}
	return nil
}
