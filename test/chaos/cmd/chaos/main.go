// Command chaos runs Outrigger's chaos harness (package chaos): `make chaos`.
// It prints the seed first; the same -seed and -duration replay the same
// schedule. It exits 1 when an invariant was violated.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outrigger-ccm/outrigger/test/chaos"
)

func main() {
	cfg := chaos.Config{Log: os.Stdout}
	flag.Uint64Var(&cfg.Seed, "seed", 0, "Seed of the schedule; 0 picks one (printed).")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "How long workload and faults run, before the wait for quiescence.")
	flag.IntVar(&cfg.Nodes, "nodes", 50, "Nodes at the start.")
	flag.IntVar(&cfg.Services, "services", 50, "LoadBalancer Services at the start.")
	flag.IntVar(&cfg.Replicas, "replicas", 2, "Outrigger replicas (leader election on).")
	flag.StringVar(&cfg.Outrigger, "outrigger", "bin/outrigger", "The outrigger binary the replicas run.")
	flag.StringVar(&cfg.WorkDir, "workdir", "", "Where logs, kubeconfig and cloud-config go; default a temporary directory, kept when the run fails.")
	flag.DurationVar(&cfg.Quiesce, "quiesce", 5*time.Minute, "Longest wait for every invariant to hold after the last fault.")
	jsonOut := flag.String("json", "bin/chaos-report.json", "Where to write the JSON report; empty for none.")
	flag.Parse()
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() >> 1
	}
	fmt.Printf("chaos seed: %d (replay with -seed %d -duration %v)\n", cfg.Seed, cfg.Seed, cfg.Duration)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	report, err := chaos.Run(ctx, cfg)
	if report != nil {
		fmt.Println()
		report.Table(os.Stdout)
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(report, "", "  ")
			if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
				fmt.Fprintln(os.Stderr, "chaos:", werr)
			} else {
				fmt.Println("JSON report:", *jsonOut)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if len(report.Violations) > 0 || !report.Quiesced {
		fmt.Fprintf(os.Stderr, "chaos: %d invariant violations (logs in %s)\n", len(report.Violations), report.WorkDir)
		os.Exit(1)
	}
}
