// Command idle measures what a CCM costs a quiet cluster: N initialized
// nodes (and their instances) that nothing changes, the CCM running with its
// default flags and controllers, and the cloud calls per second it makes
// over a window after a warm-up, with its peak memory.
//
//	make build bin/upstream-ccm
//	go run ./bench/idle -nodes 5000 -duration 5m -upstream bin/upstream-ccm
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/pkg/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

type config struct {
	nodes            int
	duration, warmup time.Duration
	runs             int
	latency          time.Duration
	rateLimit        float64
	outrigger        string
	upstream         string
	// outriggerFlags are added to Outrigger's command line.
	outriggerFlags []string
}

func main() {
	var cfg config
	flag.IntVar(&cfg.nodes, "nodes", 5000, "initialized nodes in the cluster")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Minute, "how long the quiet cluster is measured")
	flag.DurationVar(&cfg.warmup, "warmup", 30*time.Second, "time the CCM runs before the measurement starts")
	flag.DurationVar(&cfg.latency, "cloud-latency", 20*time.Millisecond, "latency of every sim cloud call")
	flag.Float64Var(&cfg.rateLimit, "cloud-rate-limit", 100, "calls per second the sim cloud accepts before answering 429")
	flag.StringVar(&cfg.outrigger, "outrigger-bin", "bin/outrigger", "the outrigger binary (make build)")
	flag.StringVar(&cfg.upstream, "upstream", "", "also run this upstream cloud-controller-manager binary (make bin/upstream-ccm)")
	flag.IntVar(&cfg.runs, "runs", 1, "runs of each CCM, alternating; peak RSS varies with when the Go collector runs, so several runs give its median and range")
	extra := flag.String("outrigger-flags", "", "extra Outrigger flags, space-separated, e.g. --feature-gates=BatchInstanceLookups=false for a provider with only the standard interface")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	flag.Parse()
	cfg.outriggerFlags = strings.Fields(*extra)
	_ = klogFlags.Set("logtostderr", "false")
	_ = klogFlags.Set("stderrthreshold", "ERROR")
	ctrl.SetLogger(klog.NewKlogr())

	fmt.Printf("%d initialized Ready nodes, nothing changing; each CCM with its default flags (cloud-node, cloud-node-lifecycle and service-lb controllers); Outrigger also %q; warm-up %s, measured over %s; sim cloud: %s latency, %.0f calls/s rate limit\n\n",
		cfg.nodes, strings.Join(cfg.outriggerFlags, " "), cfg.warmup, cfg.duration, cfg.latency, cfg.rateLimit)
	fmt.Println("| CCM | run | cloud calls | cloud calls per second | throttled (429) | API writes | peak RSS (MiB) | binary size (MiB) | modules linked |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	ccms := [][2]string{{"Outrigger", cfg.outrigger}}
	if cfg.upstream != "" {
		ccms = append(ccms, [2]string{"upstream", cfg.upstream})
	}
	peaks := map[string][]float64{}
	for i := range max(1, cfg.runs) {
		for _, ccm := range ccms {
			r, err := once(context.Background(), cfg, ccm[1], ccm[0] == "upstream")
			if err != nil {
				fmt.Fprintln(os.Stderr, "idle:", err)
				os.Exit(1)
			}
			size, modules, err := binaryFacts(ccm[1])
			if err != nil {
				fmt.Fprintln(os.Stderr, "idle:", err)
				os.Exit(1)
			}
			peaks[ccm[0]] = append(peaks[ccm[0]], r.rss)
			fmt.Printf("| %s | %d | %d | %.2f | %d | %d | %.0f | %.1f | %d |\n", ccm[0], i+1, r.calls.Total, float64(r.calls.Total)/cfg.duration.Seconds(), r.calls.Throttled, r.writes, r.rss, size, modules)
		}
	}
	if cfg.runs > 1 {
		fmt.Println()
		for _, ccm := range ccms {
			p := peaks[ccm[0]]
			slices.Sort(p)
			fmt.Printf("%s: peak RSS median %.0f MiB, range %.0f to %.0f over %d runs\n", ccm[0], median(p), p[0], p[len(p)-1], len(p))
		}
	}
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

type result struct {
	calls  simcloud.Calls
	writes int64
	rss    float64
}

func once(ctx context.Context, cfg config, bin string, upstream bool) (result, error) {
	var r result
	env, err := benchenv.Start(ctx)
	if err != nil {
		return r, err
	}
	defer env.Close()
	client, cloud, kubeconfig, cloudConfig := env.Client, env.Cloud, env.Kubeconfig, env.CloudConfig
	// Nodes as a CCM leaves them: providerID, labels, addresses, no taint.
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 64, cfg.nodes, func(i int) {
		in, err := cloud.Create(simcloud.CreateRequest{Name: fmt.Sprintf("idle-%05d", i)})
		if err != nil {
			failed.Store(err)
			return
		}
		n := kubeletsim.NewNode(in.Name)
		n.Spec.Taints = nil
		n.Spec.ProviderID = "sim://" + in.ID
		n.Labels[corev1.LabelTopologyZone] = in.Zone
		n.Labels[corev1.LabelTopologyRegion] = in.Region
		n.Labels[corev1.LabelInstanceTypeStable] = in.Type
		n.Status.Addresses = nil
		for _, a := range in.Addresses {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(a.Type), Address: a.Address})
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		return r, fmt.Errorf("creating nodes: %w", err)
	}
	cloud.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: cfg.latency}, RateLimit: cfg.rateLimit})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	args := []string{"--cloud-provider=" + sim.ProviderName, "--cloud-config=" + cloudConfig, "--kubeconfig=" + kubeconfig,
		"--secure-port=0", "--leader-elect=false", "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller"}
	logName := "outrigger-idle.log"
	if upstream {
		logName = "upstream-ccm-idle.log"
	} else {
		args = append(args, cfg.outriggerFlags...)
	}
	proc, err := benchenv.StartProcess(runCtx, bin, args, logName)
	if err != nil {
		return r, err
	}
	select {
	case err := <-proc.Done:
		return r, fmt.Errorf("%s exited during the warm-up: %v (log: %s)", bin, err, filepath.Join(os.TempDir(), logName))
	case <-time.After(cfg.warmup):
	}
	cloud.ResetCalls()
	before, _, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return r, err
	}
	select {
	case err := <-proc.Done:
		return r, fmt.Errorf("%s exited: %v", bin, err)
	case <-time.After(cfg.duration):
	}
	r.calls = cloud.Calls()
	after, _, err := benchenv.APICounts(ctx, client)
	if err != nil {
		return r, err
	}
	r.writes = after - before
	if r.rss, err = proc.PeakRSS(); err != nil {
		return r, err
	}
	stop()
	_ = <-proc.Done //nolint:staticcheck // its exit after the stop says nothing
	return r, nil
}

// binaryFacts returns a binary's size in MiB and how many modules it links
// (from its embedded build information).
func binaryFacts(bin string) (float64, int, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return 0, 0, err
	}
	out, err := execOutput("go", "version", "-m", bin)
	if err != nil {
		return 0, 0, err
	}
	modules := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "dep" {
			modules++
		}
	}
	return float64(fi.Size()) / (1 << 20), modules, nil
}
