// Command lb measures load balancer provisioning on a real control plane
// with the sim cloud: N LoadBalancer Services created at once, timed until
// every one has an ingress IP; then a burst of node churn (half the churned
// nodes leave, half join), timed until every cloud load balancer's backends
// match the nodes, counting the UpdateLoadBalancer calls it took.
//
//	go run ./bench/lb -services 1000 -nodes 100 -churn 100
//	go run ./bench/lb -upstream bin/upstream-ccm   # the same, under both CCMs
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/pkg/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

type config struct {
	services, nodes, churn int
	latency                time.Duration
	rateLimit              float64
	outriggerFlags         []string
	upstream               string
	upstreamFlags          []string
	outriggerBin           string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.services, "services", 1000, "LoadBalancer Services to create")
	flag.IntVar(&cfg.nodes, "nodes", 100, "nodes in the cluster before the churn")
	flag.IntVar(&cfg.churn, "churn", 100, "nodes churned: half of them leave, half join, at once")
	flag.DurationVar(&cfg.latency, "cloud-latency", 200*time.Millisecond, "latency of every sim cloud call")
	flag.Float64Var(&cfg.rateLimit, "cloud-rate-limit", 100, "calls per second the sim cloud accepts before answering 429")
	oflags := flag.String("outrigger-flags", "", "extra Outrigger flags, space-separated (defaults otherwise)")
	flag.StringVar(&cfg.upstream, "upstream", "", "also run this upstream cloud-controller-manager binary (bench/upstream-ccm) on the same workload")
	flag.StringVar(&cfg.outriggerBin, "outrigger-bin", "", "run this outrigger binary as its own process (so its peak RSS is measured) instead of in-process")
	uflags := flag.String("upstream-flags", "", "extra upstream CCM flags, space-separated (defaults otherwise)")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	flag.Parse()
	_ = klogFlags.Set("logtostderr", "false")
	_ = klogFlags.Set("stderrthreshold", "ERROR")
	ctrl.SetLogger(klog.NewKlogr())
	cfg.outriggerFlags, cfg.upstreamFlags = strings.Fields(*oflags), strings.Fields(*uflags)

	fmt.Printf("%d LoadBalancer Services, %d nodes, %d churned (%d leave, %d join); sim cloud: %s latency per call, %.0f calls/s rate limit (429 above it)\n\n",
		cfg.services, cfg.nodes, cfg.churn, cfg.churn/2, cfg.churn-cfg.churn/2, cfg.latency, cfg.rateLimit)
	fmt.Println("| CCM | flags | seconds to all ingress | cloud calls | throttled (429) | API writes | churn: seconds to converge | churn: UpdateLoadBalancer calls | churn: other cloud calls | churn: throttled | peak RSS (MiB) |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	runs := []string{"Outrigger"}
	if cfg.upstream != "" {
		runs = append(runs, "upstream")
	}
	for _, ccm := range runs {
		r, err := once(context.Background(), cfg, ccm == "upstream")
		if err != nil {
			fmt.Fprintln(os.Stderr, "lb:", err)
			os.Exit(1)
		}
		flags := strings.Join(cfg.outriggerFlags, " ")
		if ccm == "upstream" {
			flags = strings.Join(cfg.upstreamFlags, " ")
		}
		if flags == "" {
			flags = "defaults"
		}
		rss := "(in-process)"
		if r.rss > 0 {
			rss = fmt.Sprintf("%.0f", r.rss)
		}
		fmt.Printf("| %s | %s | %.1f | %d | %d | %d | %.1f | %d | %d | %d | %s |\n", ccm, flags, r.provision, r.provisionCalls.Total, r.provisionCalls.Throttled, r.writes,
			r.converge, r.churnCalls.ByOp["SetBackends"], r.churnCalls.Total-r.churnCalls.ByOp["SetBackends"], r.churnCalls.Throttled, rss)
	}
}

type result struct {
	provision      float64
	provisionCalls simcloud.Calls
	writes         int64
	converge       float64
	churnCalls     simcloud.Calls
	rss            float64 // MiB, when the CCM ran as a process
}

func once(ctx context.Context, cfg config, upstream bool) (result, error) {
	var r result
	env, err := benchenv.Start(ctx)
	if err != nil {
		return r, err
	}
	defer env.Close()
	client, cloud, kubeconfig, cloudConfig := env.Client, env.Cloud, env.Kubeconfig, env.CloudConfig
	if err := createNodes(ctx, client, 0, cfg.nodes); err != nil {
		return r, err
	}
	cloud.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: cfg.latency}, RateLimit: cfg.rateLimit})

	var withIngress atomic.Int64
	stopWatch, err := benchenv.WatchIngress(ctx, client, &withIngress)
	if err != nil {
		return r, err
	}
	defer stopWatch()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		done <-chan error
		proc *benchenv.Process
	)
	args := []string{"--cloud-provider=" + sim.ProviderName, "--cloud-config=" + cloudConfig, "--kubeconfig=" + kubeconfig,
		"--secure-port=0", "--leader-elect=false", "--controllers=service-lb-controller"}
	switch {
	case upstream:
		proc, err = benchenv.StartProcess(runCtx, cfg.upstream, append(args, cfg.upstreamFlags...), "upstream-ccm-lb.log")
	case cfg.outriggerBin != "":
		proc, err = benchenv.StartProcess(runCtx, cfg.outriggerBin, append(args, cfg.outriggerFlags...), "outrigger-lb.log")
	default:
		opts := manager.NewOptions()
		opts.Kubeconfig, opts.CloudProvider, opts.CloudConfig = kubeconfig, sim.ProviderName, cloudConfig
		opts.Serving.BindPort, opts.LeaderElect = 0, false
		opts.Controllers = []string{"service-lb-controller"}
		reg := provider.NewRegistry()
		reg.Register(sim.ProviderName, sim.New)
		done, err = benchenv.StartOutrigger(runCtx, opts, cfg.outriggerFlags, reg)
	}
	if err != nil {
		return r, err
	}
	if proc != nil {
		done = proc.Done
	}
	time.Sleep(3 * time.Second) // both CCMs start and sync their caches

	writesBefore, _, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return r, err
	}
	start := time.Now()
	var createErr atomic.Value
	workqueue.ParallelizeUntil(ctx, 64, cfg.services, func(i int) {
		if _, err := client.CoreV1().Services("default").Create(ctx, benchenv.LoadBalancerService(fmt.Sprintf("lb-%05d", i)), metav1.CreateOptions{}); err != nil {
			createErr.Store(err)
		}
	})
	if err, _ := createErr.Load().(error); err != nil {
		return r, fmt.Errorf("creating services: %w", err)
	}
	if err := waitFor(done, func() bool { return withIngress.Load() >= int64(cfg.services) }); err != nil {
		return r, err
	}
	r.provision = time.Since(start).Seconds()
	r.provisionCalls = cloud.Calls()
	if os.Getenv("LB_BENCH_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "provision calls by op: %v\n", r.provisionCalls.ByOp)
	}
	writesAfter, _, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return r, err
	}
	// The bench's own writes (the Service creates) are not the CCM's.
	r.writes = writesAfter - writesBefore - int64(cfg.services)

	// Let stragglers (events, retries) settle, then churn.
	time.Sleep(3 * time.Second)
	cloud.ResetCalls()
	leave, join := cfg.churn/2, cfg.churn-cfg.churn/2
	want := map[string]bool{}
	for i := leave; i < cfg.nodes+join; i++ {
		want[nodeName(i)] = true
	}
	start = time.Now()
	workqueue.ParallelizeUntil(ctx, 64, leave, func(i int) {
		_ = client.CoreV1().Nodes().Delete(ctx, nodeName(i), metav1.DeleteOptions{})
	})
	if err := createNodes(ctx, client, cfg.nodes, cfg.nodes+join); err != nil {
		return r, err
	}
	converged := func() bool {
		lbs := cloud.LoadBalancers()
		if len(lbs) < cfg.services {
			return false
		}
		for _, lb := range lbs {
			if len(lb.Backends) != len(want) {
				return false
			}
			for _, b := range lb.Backends {
				if !want[b.Node] {
					return false
				}
			}
		}
		return true
	}
	if err := waitFor(done, converged); err != nil {
		return r, err
	}
	r.converge = time.Since(start).Seconds()
	time.Sleep(2 * time.Second) // late calls count too
	r.churnCalls = cloud.Calls()
	if proc != nil {
		if r.rss, err = proc.PeakRSS(); err != nil {
			return r, err
		}
	}
	stop()
	_ = <-done //nolint:staticcheck // its exit after the stop says nothing
	return r, nil
}

// waitFor polls cond until it holds or the CCM exits.
func waitFor(done <-chan error, cond func() bool) error {
	for !cond() {
		select {
		case err := <-done:
			return fmt.Errorf("the CCM stopped: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func nodeName(i int) string { return fmt.Sprintf("lb-node-%05d", i) }

// createNodes registers initialized nodes from..to-1.
func createNodes(ctx context.Context, client kubernetes.Interface, from, to int) error {
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 64, to-from, func(k int) {
		i := from + k
		n := kubeletsim.NewNode(nodeName(i))
		n.Spec.Taints = nil
		n.Spec.ProviderID = "sim://" + n.Name
		// The i-th address of the sim cloud's instance range,
		// 198.19.128.0/17, apart from the VIPs.
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.19.%d.%d", 128|i>>8&127, i&255)})
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("creating nodes: %w", err)
	}
	return nil
}
