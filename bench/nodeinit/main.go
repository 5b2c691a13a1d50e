// Command nodeinit measures how fast Outrigger initializes a burst of new
// nodes on a real control plane, and what that costs the cloud and the API
// server. For each size it creates that many tainted nodes (as kubelets with
// --cloud-provider=external register them) and matching sim cloud instances,
// then starts Outrigger with its default flags and times until no node
// carries the uninitialized taint.
//
//	go run ./bench/nodeinit -nodes 1000,5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// refresh is the address refresh period Outrigger runs with.
var refresh time.Duration

// timeline, when set, prints each run's progress every 100 ms to stderr.
var timeline bool

// runs numbers the CCM runs, so that each elects its leader on a lease of
// its own rather than wait for the previous run's to expire.
var runs atomic.Int64

func main() {
	sizes := flag.String("nodes", "1000,5000", "comma-separated node counts, one run each")
	latency := flag.Duration("cloud-latency", 20*time.Millisecond, "latency of every sim cloud call")
	rateLimit := flag.Float64("cloud-rate-limit", 100, "calls per second the sim cloud accepts before answering 429")
	extra := flag.String("outrigger-flags", "", "extra Outrigger flags, space-separated (defaults otherwise)")
	refreshFlag := flag.Duration("refresh", 10*time.Second, "--node-status-update-frequency for the idle measurement (upstream and Outrigger default: 5m)")
	noBatch := flag.Bool("no-batch", false, "hide the sim provider's batch lookup, as for a provider that lacks one")
	upstream := flag.String("upstream", "", "run this upstream cloud-controller-manager binary (bench/upstream-ccm) instead of Outrigger, with its own default flags plus -outrigger-flags")
	outriggerBin := flag.String("outrigger-bin", "bin/outrigger-ccm", "Outrigger's command with the benchmark providers registered, run as its own process (make bin/outrigger-ccm)")
	overPlugin := flag.Bool("plugin", false, "serve the sim provider as a plugin on a unix socket and run Outrigger with the grpc provider, to measure the plugin boundary")
	provider := flag.String("provider", sim.ProviderName, "the provider both CCMs run: "+sim.ProviderName+" (the sim provider and its cloud) or "+upstreamfake.ProviderName+" (upstream's k8s.io/cloud-provider/fake, standard interface only, with the same latency and rate limit added)")
	apiLimit := flag.Bool("api-write-limit", false, "run no CCM: make the two writes that initialize each node (addresses; provider ID, labels and taint removal) from the benchmark itself, 256 at a time and with no client-side limit, to measure the API server's write limit on this machine")
	flag.BoolVar(&timeline, "timeline", false, "print each run's progress to stderr: per 100 ms, the cloud calls and the nodes initialized so far, to see where the time goes")
	networking := flag.Bool("networking", false, "also allocate pod CIDRs and create routes (dual-stack), and wait for every node's routes")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", "0")
	flag.Parse()
	if *provider != sim.ProviderName && *provider != upstreamfake.ProviderName {
		fmt.Fprintf(os.Stderr, "nodeinit: -provider must be %s or %s\n", sim.ProviderName, upstreamfake.ProviderName)
		os.Exit(2)
	}
	refresh = *refreshFlag
	ctrl.SetLogger(klog.NewKlogr())
	_ = klogFlags.Set("logtostderr", "false")
	_ = klogFlags.Set("stderrthreshold", "ERROR")

	if err := run(context.Background(), *sizes, config{*latency, *rateLimit, strings.Fields(*extra), *noBatch, *networking, *upstream, *overPlugin, *apiLimit, *provider == upstreamfake.ProviderName, *outriggerBin}); err != nil {
		fmt.Fprintln(os.Stderr, "nodeinit:", err)
		os.Exit(1)
	}
}

// config is one benchmark run's settings.
type config struct {
	latency    time.Duration
	rateLimit  float64
	extra      []string
	noBatch    bool
	networking bool
	// upstream is the upstream CCM binary to run instead of Outrigger.
	upstream string
	// plugin puts the sim provider behind the plugin boundary.
	plugin bool
	// apiLimit runs no CCM but the benchmark's own initializing writes.
	apiLimit bool
	// fake runs upstream's fake provider instead of the sim provider.
	fake bool
	// outriggerBin is Outrigger's command with the benchmark providers
	// registered (bench/outrigger-ccm).
	outriggerBin string
}

func (c config) providerName() string {
	if c.fake {
		return upstreamfake.ProviderName
	}
	return sim.ProviderName
}

// networkFlags turn on IPAM and routes with room for 16,384 nodes: 2^14
// IPv4 node CIDRs of one address each (the benchmark counts CIDRs and
// routes, not pods), from a range apart from the instances' addresses, the
// VIPs and the Service CIDR.
var networkFlags = []string{"--allocate-node-cidrs", "--cluster-cidr=198.18.64.0/18,fd00:10::/48", "--node-cidr-mask-size-ipv4=32"}

// env is the control plane the runs share.
type env struct {
	client     *kubernetes.Clientset
	kubeconfig string
	dir        string
}

// startEnv starts the control plane; stop stops it.
func startEnv(ctx context.Context) (e env, stop func(), err error) {
	cp, err := apiserver.Start(ctx)
	if err != nil {
		return env{}, nil, err
	}
	stopCP := func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	dir, err := os.MkdirTemp("", "outrigger-bench-")
	if err != nil {
		stopCP()
		return env{}, nil, err
	}
	stop = func() { _ = os.RemoveAll(dir); stopCP() }
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		stop()
		return env{}, nil, err
	}
	admin := *cp.Config
	admin.QPS, admin.Burst = 5000, 5000
	return env{client: kubernetes.NewForConfigOrDie(&admin), kubeconfig: kubeconfig, dir: dir}, stop, nil
}

func run(ctx context.Context, sizes string, cfg config) error {
	e, stop, err := startEnv(ctx)
	if err != nil {
		return err
	}
	defer stop()
	client, kubeconfig, dir := e.client, e.kubeconfig, e.dir

	if cfg.networking {
		cfg.extra = append(slices.Clone(networkFlags), cfg.extra...)
	}
	ccm := "Outrigger"
	if cfg.upstream != "" {
		ccm = benchenv.UpstreamName
	}
	if cfg.plugin {
		ccm = "Outrigger, provider over the plugin boundary (unix socket)"
	}
	if cfg.apiLimit {
		ccm = "No CCM: the API server's write limit (each node's two initializing writes, 256 at a time, no client-side limit)"
	}
	fmt.Printf("%s; provider %s; cloud: %s latency per call, %.0f calls/s rate limit (429 above it); batch lookup: %t; flags: defaults, --node-status-update-frequency=%s %s\n\n",
		ccm, cfg.providerName(), cfg.latency, cfg.rateLimit, !cfg.noBatch && !cfg.fake && cfg.upstream == "", refresh, strings.Join(cfg.extra, " "))
	if cfg.networking {
		fmt.Println("Done when every node is initialized, has pod CIDRs and NetworkUnavailable=False (RouteCreated).")
		fmt.Println()
	}
	fmt.Println("| nodes | seconds to all initialized | seconds to the first | cloud calls | cloud calls throttled (429) | most 429s in one second | API writes (until all initialized) | API writes per node | of which conflicts (409) | Synced events (after settling) | idle cloud calls per refresh period | idle: busiest second / average second | route calls: create / list / delete |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("bad -nodes entry %q", s)
		}
		r, err := once(ctx, client, kubeconfig, dir, n, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("| %d | %.1f | %.2f | %d | %d | %d | %d | %.2f | %d | %d | %.1f | %d / %.1f | %d / %d / %d |\n", n, r.seconds, r.firstSeconds, r.calls.Total, r.calls.Throttled, r.peakThrottled, r.writes, float64(r.writes)/float64(n), r.conflicts, r.events, r.idleCallsPerPeriod,
			r.idlePeak, r.idleCallsPerPeriod/refresh.Seconds(),
			r.calls.ByOp["CreateRoute"], r.calls.ByOp["ListRoutes"], r.calls.ByOp["DeleteRoute"])
	}
	return nil
}

type result struct {
	seconds float64
	// firstSeconds is when the first node was initialized: the CCM's
	// start-up (process, leader election, caches) and one node's work.
	firstSeconds float64
	calls        simcloud.Calls
	writes       int64
	conflicts    int64
	events       int
	// idleCallsPerPeriod is the cloud calls per --node-status-update-frequency
	// once all nodes are initialized.
	idleCallsPerPeriod float64
	// peakThrottled is the most 429s in any one second until all nodes
	// were initialized; idlePeak the most calls in any one second of the
	// idle measurement.
	peakThrottled, idlePeak int64
}

func once(ctx context.Context, client *kubernetes.Clientset, kubeconfig, dir string, n int, cfg config) (result, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%d-%05d", n, i)
	}
	cloudConfig := filepath.Join(dir, "cloud.yaml")
	counts, setLimits, err := startCloud(ctx, cfg, cloudConfig, names)
	if err != nil {
		return result{}, err
	}
	var createErr error
	workqueue.ParallelizeUntil(ctx, 64, n, func(i int) {
		if err := kubeletsim.Register(ctx, client, names[i]); err != nil {
			createErr = err
		}
	})
	if createErr != nil {
		return result{}, createErr
	}
	defer func() {
		_ = client.CoreV1().Nodes().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	}()
	setLimits()

	untainted, stopWatch, err := benchenv.WatchInitialized(ctx, client, cfg.networking)
	if err != nil {
		return result{}, err
	}
	defer stopWatch()
	writesBefore, conflictsBefore, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return result{}, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var samples sampler
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go samples.run(sampleCtx, counts)
	start := time.Now()
	done, err := startCCM(runCtx, cfg, kubeconfig, cloudConfig, n)
	if err != nil {
		return result{}, err
	}
	var first time.Duration
	initialized := make([]time.Time, 0, n)
	for left := n; left > 0; {
		select {
		case err := <-done:
			return result{}, fmt.Errorf("the CCM stopped: %w", err)
		case <-untainted:
			if left == n {
				first = time.Since(start)
			}
			initialized = append(initialized, time.Now())
			left--
		}
	}
	if timeline {
		samples.print(os.Stderr, start, initialized)
	}
	r := result{seconds: time.Since(start).Seconds(), firstSeconds: first.Seconds(), calls: counts()}
	_, r.peakThrottled = samples.peak(start, time.Now())
	writesAfter, conflictsAfter, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return result{}, err
	}
	r.writes = writesAfter - writesBefore
	r.conflicts = conflictsAfter - conflictsBefore
	// Events are posted in the background; count them once they stop coming
	// (outside the timed part), then stop Outrigger.
	for last := -1; ; time.Sleep(2 * time.Second) {
		events, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=Synced"})
		if err != nil {
			return result{}, err
		}
		if len(events.Items) == last {
			break
		}
		last, r.events = len(events.Items), len(events.Items)
	}
	// Idle cost: cloud calls over three address refresh periods, nothing
	// changing (the lifecycle check of Ready nodes costs none), from two
	// periods after the start: the refresh skips nodes initialized within
	// its period, so the first pass that asks about every node starts one
	// period in, and a window starting before it would count a skipped pass.
	time.Sleep(max(refresh, time.Until(start.Add(2*refresh))))
	idleStart, idleTotal := time.Now(), counts().Total
	time.Sleep(3 * refresh)
	r.idleCallsPerPeriod = float64(counts().Total-idleTotal) / 3
	r.idlePeak, _ = samples.peak(idleStart, time.Now())
	if timeline {
		samples.printPerSecond(os.Stderr, idleStart, time.Now())
	}
	stop()
	_ = <-done //nolint:staticcheck // the CCM's exit after the stop says nothing

	_ = client.CoreV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	return r, nil
}

// startCCM starts the CCM under test until ctx ends; done receives its exit.
func startCCM(ctx context.Context, cfg config, kubeconfig, cloudConfig string, n int) (<-chan error, error) {
	if cfg.apiLimit {
		return benchenv.WriteOnly(ctx, kubeconfig)
	}
	if cfg.upstream != "" {
		args := []string{"--cloud-provider=" + cfg.providerName(), "--cloud-config=" + cloudConfig, "--kubeconfig=" + kubeconfig,
			"--secure-port=0", "--leader-elect-resource-name=" + fmt.Sprintf("bench-upstream-%d-%d", n, runs.Add(1)),
			"--node-status-update-frequency=" + refresh.String(),
			// The controllers Outrigger runs without -networking; upstream's
			// route controller refuses to start without a cluster CIDR.
			"--controllers=cloud-node-controller,cloud-node-lifecycle-controller"}
		return benchenv.StartUpstream(ctx, cfg.upstream, append(args, cfg.extra...), fmt.Sprintf("upstream-ccm-%d.log", n))
	}
	lease := fmt.Sprintf("bench-%d-%d", n, runs.Add(1))
	if !cfg.plugin {
		// Its own process, as the upstream CCM runs: sharing the
		// benchmark's process would share its collector and CPU with the
		// cloud and the watchers.
		args := []string{"--cloud-provider=" + cfg.providerName(), "--cloud-config=" + cloudConfig, "--kubeconfig=" + kubeconfig,
			"--secure-port=0", "--leader-elect-resource-name=" + lease, "--node-status-update-frequency=" + refresh.String()}
		if cfg.noBatch {
			args = append(args, "--feature-gates=BatchInstanceLookups=false")
		}
		return benchenv.StartUpstream(ctx, cfg.outriggerBin, append(args, cfg.extra...), fmt.Sprintf("outrigger-%d.log", n))
	}
	// The plugin boundary is measured in-process: the benchmark serves the
	// provider on a unix socket next to the manager.
	opts := manager.NewOptions()
	opts.Kubeconfig = kubeconfig
	opts.CloudConfig = cloudConfig
	opts.Serving.BindPort = 0
	opts.LeaderElectResourceName = lease
	opts.NodeStatusUpdateFrequency = refresh
	reg := provider.NewRegistry()
	grpcConfig, err := benchenv.ServePlugin(ctx, cloudConfig, sim.New)
	if err != nil {
		return nil, err
	}
	reg.Register(plugin.ProviderName, plugin.NewProvider)
	opts.CloudProvider, opts.CloudConfig = plugin.ProviderName, grpcConfig
	return benchenv.StartOutrigger(ctx, opts, cfg.extra, reg)
}
