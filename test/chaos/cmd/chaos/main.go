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
	flag.IntVar(&cfg.Failover, "failover", 0, "Failover run: SIGKILL the leader this many times during node and Service churn and measure the time to a new leader (3 replicas, upstream's default leader election: 15s lease, 10s renew deadline, 2s retry period); -duration then bounds the workload (default 45s per kill) and no other fault is injected.")
	flag.BoolVar(&cfg.Shared, "shared", false, "Shared cloud: a second CCM (2 Outrigger replicas with --load-balancer-class="+chaos.ForeignClass+", their own Lease, only the service controller) serves that class's Services on the same cloud and cluster, and is SIGKILLed too; neither CCM may change or delete the other's load balancers.")
	flag.BoolVar(&cfg.Hang, "hang", false, "Hung cloud calls: a fault during which the cloud never answers calls on the load balancers of some Services (the replicas give up at --cloud-call-timeout=5s); Services created meanwhile must get their load balancer during it.")
	flag.BoolVar(&cfg.LostResponses, "lost-responses", false, "Lost API answers: the replicas reach the API server through a proxy; a fault during which a third of their writes commit and their answer is lost (504 or the connection closed).")
	flag.StringVar(&cfg.Plugin, "plugin", "", "Plugin restarts: the sim provider served as a plugin, this binary (build it with 'go build -o bin/sim-plugin ./examples/sim-plugin'), one process per Outrigger replica on a unix socket; a fault SIGKILLs every plugin while a cloud call is in flight and starts them again.")
	flag.BoolVar(&cfg.SecondCluster, "second-cluster", false, "Second cluster on the same cloud account: its own etcd and kube-apiserver, 2 Outrigger replicas with routes on (cluster CIDR 198.18.64.0/18), a quarter of -nodes and -services and a workload of its own, SIGKILLed too; both clusters keep the default --cluster-name, and neither may create, change or delete a load balancer or route tagged with the other's cluster-id.")
	jsonOut := flag.String("json", "bin/chaos-report.json", "Where to write the JSON report; empty for none.")
	flag.Parse()
	if cfg.Failover > 0 {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			cfg.Duration = 0 // the failover run's default
		}
		if !set["replicas"] {
			cfg.Replicas = 0
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64() >> 1
	}
	if cfg.Failover > 0 {
		fmt.Printf("chaos seed: %d (replay with -seed %d -failover %d)\n", cfg.Seed, cfg.Seed, cfg.Failover)
	} else {
		settings := ""
		for _, f := range []struct {
			name string
			on   bool
		}{{"-shared", cfg.Shared}, {"-hang", cfg.Hang}, {"-lost-responses", cfg.LostResponses}, {"-plugin " + cfg.Plugin, cfg.Plugin != ""}, {"-second-cluster", cfg.SecondCluster}} {
			if f.on {
				settings += " " + f.name
			}
		}
		fmt.Printf("chaos seed: %d (replay with -seed %d -duration %v%s)\n", cfg.Seed, cfg.Seed, cfg.Duration, settings)
	}

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
	if report.Failover != nil && (len(report.Failover.Failures) > 0 || report.Failover.FollowerCalls > 0) {
		fmt.Fprintf(os.Stderr, "chaos: %d failovers failed, %d cloud calls by non-leaders (logs in %s)\n", len(report.Failover.Failures), report.Failover.FollowerCalls, report.WorkDir)
		os.Exit(1)
	}
	if len(report.Violations) > 0 || !report.Quiesced {
		fmt.Fprintf(os.Stderr, "chaos: %d invariant violations (logs in %s)\n", len(report.Violations), report.WorkDir)
		os.Exit(1)
	}
}
