// Command hung measures what a provider hung on some objects costs the
// others: for each CCM and each number of hung objects, a fresh control
// plane, the hung objects created first (upstream's fake provider never
// returns from their call, whatever its context), then, once their first
// call hangs, healthy ones, timed until every one is served. With -kind
// services the objects are LoadBalancer Services (a few initialized nodes
// as backends; EnsureLoadBalancer hangs) and the upstream CCM runs with 1
// and with 16 Service workers; with -kind nodes they are nodes to
// initialize (InstanceMetadata hangs) and it runs with 1 and 16 node
// workers. Outrigger runs at its defaults.
//
//	go run ./bench/hung -hung 0,12,100,1000
//	go run ./bench/hung -kind nodes -hung 0,12,100,1000
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
	"slices"
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

// ccmsFor are the CCMs measured for a kind of object: the upstream CCM's
// workers of that kind are the flag that matters.
func ccmsFor(k kind) map[string]ccm {
	workers := "--concurrent-" + k.workers + "-syncs="
	return map[string]ccm{
		"outrigger":   {name: "Outrigger, defaults"},
		"upstream-1":  {name: "upstream, " + workers + "1", flags: []string{workers + "1"}},
		"upstream-16": {name: "upstream, " + workers + "16", flags: []string{workers + "16"}},
	}
}

// kind is what hangs: its objects' names, what serving one means, and the
// upstream CCM's controllers and workers for it.
type kind struct {
	plural, served, workers, controllers string
}

var kinds = map[string]kind{
	"services": {plural: "Services", served: "have load balancers", workers: "service",
		controllers: "cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller"},
	"nodes": {plural: "nodes", served: "are initialized", workers: "node",
		controllers: "cloud-node-controller,cloud-node-lifecycle-controller"},
}

type config struct {
	upstreamBin, outriggerBin string
	kind                      kind
	kindName                  string
	nodes, healthy            int
	latency, bound            time.Duration
}

func main() {
	var cfg config
	hungList := flag.String("hung", "0,12,100,1000", "comma-separated counts of hung objects")
	flag.StringVar(&cfg.kindName, "kind", "services", "what hangs: services (EnsureLoadBalancer) or nodes (InstanceMetadata)")
	which := flag.String("ccms", "outrigger,upstream-1,upstream-16", "the CCMs, in order")
	flag.IntVar(&cfg.healthy, "healthy", 10, "healthy objects created after the hung ones")
	flag.IntVar(&cfg.nodes, "nodes", 3, "nodes (the load balancers' backends; -kind services)")
	flag.DurationVar(&cfg.latency, "cloud-latency", 20*time.Millisecond, "latency of every cloud call")
	flag.DurationVar(&cfg.bound, "bound", 3*time.Minute, "the longest the healthy Services are waited for")
	flag.StringVar(&cfg.upstreamBin, "upstream", "bin/upstream-ccm", "the upstream CCM binary (make bin/upstream-ccm)")
	flag.StringVar(&cfg.outriggerBin, "outrigger-bin", "bin/outrigger-ccm", "Outrigger with the benchmark providers (make bin/outrigger-ccm)")
	out := flag.String("out", "", "where the table is written (default docs/performance/hung.md, hung-nodes.md for -kind nodes)")
	flag.Parse()
	var ok bool
	if cfg.kind, ok = kinds[cfg.kindName]; !ok {
		fatal(fmt.Errorf("-kind %q: want services or nodes", cfg.kindName))
	}
	if *out == "" {
		*out = "docs/performance/hung.md"
		if cfg.kindName != "services" {
			*out = "docs/performance/hung-" + cfg.kindName + ".md"
		}
	}
	ccms := ccmsFor(cfg.kind)
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
	fmt.Fprintf(&b, "| s until %d healthy %s %s |", cfg.healthy, cfg.kind.plural, cfg.kind.served)
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

// run measures one CCM with hung objects: the time from creating the
// healthy ones to the last one served, or -1 past the bound.
func run(ctx context.Context, cfg config, key string, c ccm, hung int) (time.Duration, error) {
	env, err := benchenv.Start(ctx)
	if err != nil {
		return 0, err
	}
	defer env.Close()
	// The instances the cloud knows: the Services' backends, or the hung
	// nodes and the healthy ones.
	var backends, hungNodes, okNodes []string
	if cfg.kindName == "nodes" {
		for i := range hung {
			hungNodes = append(hungNodes, fmt.Sprintf("hang-node-%d", i))
		}
		for i := range cfg.healthy {
			okNodes = append(okNodes, fmt.Sprintf("ok-node-%d", i))
		}
	} else {
		for i := range cfg.nodes {
			backends = append(backends, fmt.Sprintf("hung-node-%d", i))
		}
	}
	cloudConfig := filepath.Join(env.Dir, "upstream-fake.yaml")
	stats, err := upstreamfake.WriteConfig(cloudConfig, upstreamfake.Config{
		Nodes:   slices.Concat(backends, hungNodes, okNodes),
		Latency: metav1.Duration{Duration: cfg.latency}, LoadBalancers: cfg.kindName == "services", HangPrefix: "hang-",
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
	for _, n := range backends {
		if err := kubeletsim.Register(ctx, env.Client, n); err != nil {
			return 0, err
		}
	}

	args := []string{"--cloud-provider=" + upstreamfake.ProviderName, "--cloud-config=" + cloudConfig,
		"--kubeconfig=" + env.Kubeconfig, "--secure-port=0", "--leader-elect=false"}
	bin := cfg.outriggerBin
	if key != "outrigger" {
		bin = cfg.upstreamBin
		args = append(args, "--controllers="+cfg.kind.controllers)
	}
	runCtx, stopCCM := context.WithCancel(ctx)
	proc, err := benchenv.StartProcess(runCtx, bin, append(args, c.flags...), fmt.Sprintf("hung-%s-%s-%d.log", cfg.kindName, key, hung))
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
	// Nodes initialized so far (hung ones never are).
	var done int
	countInitialized := func() int {
		for {
			select {
			case <-initialized:
				done++
			default:
				return done
			}
		}
	}
	if len(backends) > 0 && !waitFor(ctx, cfg.bound, func() bool { return countInitialized() >= len(backends) }) {
		return 0, fmt.Errorf("nodes not initialized within %s", cfg.bound)
	}
	for i := range hung {
		var err error
		if cfg.kindName == "nodes" {
			err = kubeletsim.Register(ctx, env.Client, hungNodes[i])
		} else {
			err = create(ctx, env.Client, fmt.Sprintf("hang-%d", i))
		}
		if err != nil {
			return 0, err
		}
	}
	// The healthy objects come once a hung call has started (the CCM is
	// busy with the hung ones), as a user's would.
	if hung > 0 && !waitFor(ctx, cfg.bound, func() bool { return calls().Hung > 0 }) {
		return 0, fmt.Errorf("no hung call within %s", cfg.bound)
	}
	start := time.Now()
	served := func() bool { return withIngress.Load() >= int64(cfg.healthy) }
	if cfg.kindName == "nodes" {
		for _, n := range okNodes {
			if err := kubeletsim.Register(ctx, env.Client, n); err != nil {
				return 0, err
			}
		}
		served = func() bool { return countInitialized() >= cfg.healthy }
	} else {
		for i := range cfg.healthy {
			if err := create(ctx, env.Client, fmt.Sprintf("ok-%d", i)); err != nil {
				return 0, err
			}
		}
	}
	if !waitFor(ctx, cfg.bound, served) {
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
