// Command hung measures what a provider hung on some objects costs the
// others: for each CCM and each number of hung objects, a fresh control
// plane, the hung objects created first (upstream's fake provider never
// returns from their call, whatever its context), then, once their first
// call hangs, healthy ones, timed until every one is served. With -kind
// services the objects are LoadBalancer Services (a few initialized nodes
// as backends; EnsureLoadBalancer hangs) and the upstream CCM runs with 1
// and with 16 Service workers; with -kind nodes they are nodes to
// initialize (InstanceMetadata hangs) and it runs with 1 and 16 node
// workers; with -kind routes they are nodes with pod CIDRs to route
// (CreateRoute hangs), and the upstream CCM runs at its defaults. Outrigger
// runs at its defaults, with the provider in process and served as a plugin
// (the Go SDK, by this process, over a unix socket).
//
//	go run ./bench/hung -hung 0,12,100,1000
//	go run ./bench/hung -kind nodes -hung 0,12,100,1000
//	go run ./bench/hung -kind routes -hung 0,12,100,1000
//
// Each cell is the median of -runs runs. It writes the table to -out
// (markdown) and prints it.
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
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// ccm is one CCM as run here: its binary and flags.
type ccm struct {
	name  string
	flags []string
}

// ccmsFor are the CCMs measured for a kind of object, and their order: the
// upstream CCM's workers of that kind are the flag that matters; its route
// controller has none (it creates a pass's routes at once, up to 200).
func ccmsFor(k kind) (map[string]ccm, []string) {
	ccms := map[string]ccm{
		outrigger:       {name: "Outrigger, defaults"},
		outriggerPlugin: {name: "Outrigger, defaults, provider as a plugin"},
	}
	if k.workers == "" {
		ccms["upstream"] = ccm{name: "upstream, defaults"}
		return ccms, []string{outrigger, outriggerPlugin, "upstream"}
	}
	workers := "--concurrent-" + k.workers + "-syncs="
	ccms["upstream-1"] = ccm{name: "upstream, " + workers + "1", flags: []string{workers + "1"}}
	ccms["upstream-16"] = ccm{name: "upstream, " + workers + "16", flags: []string{workers + "16"}}
	return ccms, []string{outrigger, outriggerPlugin, "upstream-1", "upstream-16"}
}

// Outrigger's keys in -ccms.
const (
	outrigger       = "outrigger"
	outriggerPlugin = "outrigger-plugin"
)

// kind is what hangs: its objects' names, what serving one means, the
// fake's call that hangs, and the controllers (and their flags) and the
// upstream CCM's workers for it.
type kind struct {
	plural, served, hangKind, workers, controllers string
	flags                                          []string
}

// routeFlags turn the route controller on, for nodes whose pod CIDRs are
// set when they register (no IPAM runs).
var routeFlags = []string{"--allocate-node-cidrs=true", "--configure-cloud-routes=true", "--cluster-cidr=198.18.64.0/18,fd00:10::/48"}

var kinds = map[string]kind{
	"services": {plural: "Services", served: "have load balancers", hangKind: "service", workers: "service",
		controllers: "cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller"},
	"nodes": {plural: "nodes", served: "are initialized", hangKind: "node", workers: "node",
		controllers: "cloud-node-controller,cloud-node-lifecycle-controller"},
	"routes": {plural: "nodes", served: "are initialized and routed", hangKind: "route",
		controllers: "cloud-node-controller,cloud-node-lifecycle-controller,node-route-controller", flags: routeFlags},
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
	flag.StringVar(&cfg.kindName, "kind", "services", "what hangs: services (EnsureLoadBalancer), nodes (InstanceMetadata) or routes (CreateRoute)")
	which := flag.String("ccms", "", "the CCMs, in order (default: all of the kind's)")
	flag.IntVar(&cfg.healthy, "healthy", 10, "healthy objects created after the hung ones")
	flag.IntVar(&cfg.nodes, "nodes", 3, "nodes (the load balancers' backends; -kind services)")
	flag.DurationVar(&cfg.latency, "cloud-latency", 20*time.Millisecond, "latency of every cloud call")
	flag.DurationVar(&cfg.bound, "bound", 3*time.Minute, "the longest the healthy Services are waited for")
	flag.StringVar(&cfg.upstreamBin, "upstream", "bin/upstream-ccm", "the upstream CCM binary (make bin/upstream-ccm)")
	flag.StringVar(&cfg.outriggerBin, "outrigger-bin", "bin/outrigger-ccm", "Outrigger with the benchmark providers (make bin/outrigger-ccm)")
	runs := flag.Int("runs", 3, "runs of each cell (a fresh control plane each), reported by their median: the cells are tenths of a second on a shared machine; a run past the bound ends its cell")
	out := flag.String("out", "", "where the table is written (default docs/performance/hung.md, hung-nodes.md for -kind nodes)")
	flag.Parse()
	var ok bool
	if cfg.kind, ok = kinds[cfg.kindName]; !ok {
		fatal(fmt.Errorf("-kind %q: want services, nodes or routes", cfg.kindName))
	}
	if *out == "" {
		*out = "docs/performance/hung.md"
		if cfg.kindName != "services" {
			*out = "docs/performance/hung-" + cfg.kindName + ".md"
		}
	}
	ccms, order := ccmsFor(cfg.kind)
	if *which == "" {
		*which = strings.Join(order, ",")
	}
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
			var times []time.Duration
			for i := range max(1, *runs) {
				progress("%s, %d hung, run %d", c.name, h, i+1)
				d, err := run(ctx, cfg, name, c, h)
				if ctx.Err() != nil {
					fatal(ctx.Err())
				}
				if err != nil {
					results[name][h] = "error: " + err.Error()
					break
				}
				if d < 0 {
					results[name][h] = fmt.Sprintf("not within %s", cfg.bound)
					break
				}
				times = append(times, d)
				progress("%s, %d hung, run %d: %.2f", c.name, h, i+1, d.Seconds())
			}
			if results[name][h] == "" {
				slices.Sort(times)
				results[name][h] = fmt.Sprintf("%.2f", times[len(times)/2].Seconds())
			}
			progress("%s, %d hung: %s", c.name, h, results[name][h])
		}
	}
	var b strings.Builder
	median := ""
	if *runs > 1 {
		median = fmt.Sprintf(" (median of %d runs)", *runs)
	}
	fmt.Fprintf(&b, "| s until %d healthy %s %s%s |", cfg.healthy, cfg.kind.plural, cfg.kind.served, median)
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
	if cfg.kindName != "services" {
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
		Latency: metav1.Duration{Duration: cfg.latency}, LoadBalancers: cfg.kindName == "services", Routes: cfg.kindName == "routes",
		HangPrefix: "hang-", HangKind: cfg.kind.hangKind,
	})
	if err != nil {
		return 0, err
	}
	calls := upstreamfake.Counter(ctx, stats)
	provider := upstreamfake.ProviderName
	if key == outriggerPlugin {
		// The provider is served by this process, as a plugin is by its
		// own; its hung calls hang here (past the row, which only stops
		// taking new calls).
		pluginCtx, stopPlugin := context.WithCancel(ctx)
		defer stopPlugin()
		if cloudConfig, err = benchenv.ServePlugin(pluginCtx, cloudConfig, upstreamfake.New); err != nil {
			return 0, err
		}
		provider = plugin.ProviderName
	}
	initialized, stopNodes, err := benchenv.WatchInitialized(ctx, env.Client, cfg.kindName == "routes")
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

	args := []string{"--cloud-provider=" + provider, "--cloud-config=" + cloudConfig,
		"--kubeconfig=" + env.Kubeconfig, "--secure-port=0", "--leader-elect=false"}
	bin := cfg.outriggerBin
	if key != outrigger && key != outriggerPlugin {
		bin = cfg.upstreamBin
		args = append(args, "--controllers="+cfg.kind.controllers)
	}
	args = append(args, cfg.kind.flags...)
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
		if cfg.kindName != "services" {
			err = register(ctx, env.Client, hungNodes[i], i, cfg.kindName == "routes")
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
	if cfg.kindName != "services" {
		for i, n := range okNodes {
			if err := register(ctx, env.Client, n, hung+i, cfg.kindName == "routes"); err != nil {
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

// register registers node i as its kubelet would; with routed, with its
// pod CIDRs (one IPv4 address, one IPv6 /128 of the cluster CIDRs) as
// kubelet's --pod-cidr or an IPAM elsewhere sets them.
func register(ctx context.Context, client kubernetes.Interface, name string, i int, routed bool) error {
	if !routed {
		return kubeletsim.Register(ctx, client, name)
	}
	n := kubeletsim.NewNode(name)
	v4 := fmt.Sprintf("198.18.%d.%d/32", 64+i/256, i%256)
	n.Spec.PodCIDR = v4
	n.Spec.PodCIDRs = []string{v4, fmt.Sprintf("fd00:10::%x/128", i+1)}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	return nil
}

func create(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Services("default").Create(ctx, benchenv.LoadBalancerService(name), metav1.CreateOptions{})
	return err
}

// waitFor polls cond every 10 ms until it holds (true) or bound passes.
func waitFor(ctx context.Context, bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
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
