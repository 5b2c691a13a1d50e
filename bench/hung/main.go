// Command hung measures what a provider hung on some objects costs the
// others: for each CCM and each number of hung Services, a fresh control
// plane with a few initialized nodes, the hung Services created first
// (upstream's fake provider never returns from their EnsureLoadBalancer,
// whatever its context), then, once their first call hangs, healthy
// Services, timed until every one has its load balancer. Outrigger runs at
// its defaults; the upstream CCM with 1 and with 16 Service workers.
//
//	go run ./bench/hung -hung 0,12,100,1000
//
// It writes the table to -out (markdown) and prints it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
)

// ccm is one CCM as run here: its binary and flags.
type ccm struct {
	name  string
	flags []string
}

var ccms = map[string]ccm{
	"outrigger":   {name: "Outrigger, defaults"},
	"upstream-1":  {name: "upstream, --concurrent-service-syncs=1", flags: []string{"--concurrent-service-syncs=1"}},
	"upstream-16": {name: "upstream, --concurrent-service-syncs=16", flags: []string{"--concurrent-service-syncs=16"}},
}

type config struct {
	upstreamBin, outriggerBin string
	nodes, healthy            int
	latency, bound            time.Duration
}

func main() {
	var cfg config
	hungList := flag.String("hung", "0,12,100,1000", "comma-separated counts of hung Services")
	which := flag.String("ccms", "outrigger,upstream-1,upstream-16", "the CCMs, in order")
	flag.IntVar(&cfg.healthy, "healthy", 10, "healthy Services created after the hung ones")
	flag.IntVar(&cfg.nodes, "nodes", 3, "nodes (the load balancers' backends)")
	flag.DurationVar(&cfg.latency, "cloud-latency", 20*time.Millisecond, "latency of every cloud call")
	flag.DurationVar(&cfg.bound, "bound", 3*time.Minute, "the longest the healthy Services are waited for")
	flag.StringVar(&cfg.upstreamBin, "upstream", "bin/upstream-ccm", "the upstream CCM binary (make bin/upstream-ccm)")
	flag.StringVar(&cfg.outriggerBin, "outrigger-bin", "bin/outrigger-ccm", "Outrigger with the benchmark providers (make bin/outrigger-ccm)")
	out := flag.String("out", "docs/performance/hung.md", "where the table is written")
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var counts []int
	for _, s := range strings.Split(*hungList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			fatal(fmt.Errorf("-hung %q: want counts", s))
		}
		counts = append(counts, n)
	}
	names := strings.Split(*which, ",")
	results := map[string]map[int]string{}
	for _, name := range names {
		c, ok := ccms[name]
		if !ok {
			fatal(fmt.Errorf("-ccms: unknown %q", name))
		}
		results[name] = map[int]string{}
		for _, h := range counts {
			progress("%s, %d hung", c.name, h)
			d, err := run(ctx, cfg, name, c, h)
			switch {
			case err != nil:
				results[name][h] = "error: " + err.Error()
			case d < 0:
				results[name][h] = fmt.Sprintf("not within %s", cfg.bound)
			default:
				results[name][h] = fmt.Sprintf("%.1f", d.Seconds())
			}
			progress("%s, %d hung: %s", c.name, h, results[name][h])
			if ctx.Err() != nil {
				fatal(ctx.Err())
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| s until %d healthy Services have load balancers |", cfg.healthy)
	for _, h := range counts {
		fmt.Fprintf(&b, " %d hung |", h)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(counts)) + "\n")
	for _, name := range names {
		fmt.Fprintf(&b, "| %s |", ccms[name].name)
		for _, h := range counts {
			fmt.Fprintf(&b, " %s |", results[name][h])
		}
		b.WriteString("\n")
	}
	fmt.Print(b.String())
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fatal(err)
	}
}

// run measures one CCM with hung Services: the time from creating the
// healthy Services to the last one's load balancer, or -1 past the bound.
func run(ctx context.Context, cfg config, key string, c ccm, hung int) (time.Duration, error) {
	env, err := benchenv.Start(ctx)
	if err != nil {
		return 0, err
	}
	defer env.Close()
	nodes := make([]string, cfg.nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("hung-node-%d", i)
		if err := kubeletsim.Register(ctx, env.Client, nodes[i]); err != nil {
			return 0, err
		}
	}
	cloudConfig := filepath.Join(env.Dir, "upstream-fake.yaml")
	stats, err := upstreamfake.WriteConfig(cloudConfig, upstreamfake.Config{
		Nodes: nodes, Latency: metav1.Duration{Duration: cfg.latency}, LoadBalancers: true, HangPrefix: "hang-",
	})
	if err != nil {
		return 0, err
	}
	calls := upstreamfake.Counter(ctx, stats)
	initialized, stopNodes, err := benchenv.WatchInitialized(ctx, env.Client, false)
	if err != nil {
		return 0, err
	}
	defer stopNodes()
	var withIngress atomic.Int64
	stopIngress, err := benchenv.WatchIngress(ctx, env.Client, &withIngress)
	if err != nil {
		return 0, err
	}
	defer stopIngress()

	args := []string{"--cloud-provider=" + upstreamfake.ProviderName, "--cloud-config=" + cloudConfig,
		"--kubeconfig=" + env.Kubeconfig, "--secure-port=0", "--leader-elect=false"}
	bin := cfg.outriggerBin
	if key != "outrigger" {
		bin = cfg.upstreamBin
		args = append(args, "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller")
	}
	runCtx, stopCCM := context.WithCancel(ctx)
	proc, err := benchenv.StartProcess(runCtx, bin, append(args, c.flags...), fmt.Sprintf("hung-%s-%d.log", key, hung))
	if err != nil {
		stopCCM()
		return 0, err
	}
	defer func() {
		stopCCM()
		if err := <-proc.Done; err != nil {
			progress("%s exited: %v", key, err)
		}
	}()
	if !waitFor(ctx, cfg.bound, func() bool {
		select {
		case <-initialized:
			return true
		default:
			return false
		}
	}) {
		return 0, fmt.Errorf("nodes not initialized within %s", cfg.bound)
	}
	for i := range hung {
		if err := create(ctx, env.Client, fmt.Sprintf("hang-%d", i)); err != nil {
			return 0, err
		}
	}
	// The healthy Services come once a hung call has started (the CCM is
	// busy with the hung ones), as a user's would.
	if hung > 0 && !waitFor(ctx, cfg.bound, func() bool { return calls().Hung > 0 }) {
		return 0, fmt.Errorf("no hung call within %s", cfg.bound)
	}
	start := time.Now()
	for i := range cfg.healthy {
		if err := create(ctx, env.Client, fmt.Sprintf("ok-%d", i)); err != nil {
			return 0, err
		}
	}
	if !waitFor(ctx, cfg.bound, func() bool { return withIngress.Load() >= int64(cfg.healthy) }) {
		return -1, nil
	}
	return time.Since(start), nil
}

func create(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Services("default").Create(ctx, benchenv.LoadBalancerService(name), metav1.CreateOptions{})
	return err
}

// waitFor polls cond every 50 ms until it holds (true) or bound passes.
func waitFor(ctx context.Context, bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s hung: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "hung:", err)
	os.Exit(1)
}
