// Command scale measures Outrigger and the upstream cloud-controller-manager
// on clusters from a thousand to tens of thousands of nodes, with thousands
// of LoadBalancer Services, against a provider with only the standard
// interface (upstream's fake, k8s.io/cloud-provider/fake, with a latency per
// call and, when set, a cloud limit that answers a retry hint above it).
//
// Each row is one CCM, run as its own process, on a fresh kube-apiserver and
// etcd configured as large clusters configure them (apiServerArgs, etcdEnv):
// N nodes registered as kubelets register them, the CCM started, the clock
// run until every node is initialized; then M Services created at once,
// until every one has an ingress address; then the quiet cluster's cost per
// refresh period; then a churn (1,000 nodes leave and 1,000 join), until
// every load balancer's backends are the remaining nodes; then a restart
// (the CCM stopped and started again, until it has ensured every load
// balancer once more). A phase that does not finish within -bound ends the
// row with the figure reached. Each size first measures the API server's
// own write limit for its nodes. -append adds a run's rows to the results
// file of an earlier run of the same commit and setup.
//
// The results go to -out: scale.json, scale.md (the tables) and one SVG per
// metric against nodes (time, peak RSS, cloud calls), regenerated from the
// results on every row.
//
//	make bin/outrigger-ccm bin/upstream-ccm
//	go run ./bench/scale -nodes 1000,5000 -services 1000 -limits 0,100 -upstream bin/upstream-ccm
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	nodes := flag.String("nodes", "1000,5000,20000,50000", "comma-separated node counts")
	services := flag.String("services", "1000,10000", "comma-separated LoadBalancer Service counts, each run with every node count")
	limits := flag.String("limits", "0,100", "comma-separated cloud limits, calls per second (0: none)")
	ccms := flag.String("ccms", strings.Join(ccmOrder, ","), "the CCM variants, each run on every workload in this order")
	var rc runConfig
	flag.StringVar(&rc.upstreamBin, "upstream", "bin/upstream-ccm", "the upstream CCM binary (make bin/upstream-ccm)")
	flag.StringVar(&rc.outriggerBin, "outrigger-bin", "bin/outrigger-ccm", "Outrigger's command with the benchmark providers (make bin/outrigger-ccm)")
	flag.DurationVar(&rc.bound, "bound", 15*time.Minute, "the most each phase (nodes, load balancers, churn) may take; a phase that reaches it ends its row")
	flag.IntVar(&rc.churn, "churn", 1000, "nodes that leave, and nodes that join, in the churn step (at most half the nodes)")
	flag.DurationVar(&rc.latency, "cloud-latency", 20*time.Millisecond, "latency of every cloud call")
	flag.DurationVar(&rc.refresh, "refresh", time.Minute, "--node-status-update-frequency of both CCMs (default 5m) for the idle measurement")
	flag.IntVar(&rc.idlePeriods, "idle-periods", 2, "refresh periods the idle cost is measured over")
	flag.BoolVar(&rc.provisionOnly, "provision-only", false, "end each row after its load balancer phase (for a quick look; not for the tables)")
	flag.IntVar(&rc.serviceRuns, "service-runs", 3, "times each Service reference (the API server creating the Services, alone and with a CCM's two writes for each) is measured; the median is kept")
	flag.StringVar(&rc.profileDir, "profile", "", "a directory for CPU profiles of Outrigger's process over the load balancer phase and the idle window (go tool pprof)")
	out := flag.String("out", "docs/performance", "directory for scale.json, scale.md and the pictures")
	commit := flag.String("commit", gitCommit(), "the commit measured, for the results file")
	appendTo := flag.Bool("append", false, "add this run's rows to -out's scale.json (same commit and setup: one set of figures measured in pieces) instead of replacing it")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	flag.Parse()
	if rc.profileDir != "" {
		if err := os.MkdirAll(rc.profileDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		abs, _ := filepath.Abs(rc.profileDir)
		rc.profileDir = abs
		// bench/outrigger-ccm profiles on signals with this set
		// (bench/outrigger-ccm/profile.go).
		os.Setenv("OUTRIGGER_BENCH_PROFILE", abs)
	}
	_ = klogFlags.Set("logtostderr", "false")
	_ = klogFlags.Set("stderrthreshold", "ERROR")
	ctrl.SetLogger(klog.NewKlogr())

	ns, err := ints(*nodes, "-nodes")
	if err == nil {
		var ms []int
		if ms, err = ints(*services, "-services"); err == nil {
			var ls []float64
			if ls, err = floats(*limits); err == nil {
				var variants []string
				if variants, err = parseCCMs(*ccms); err == nil {
					err = run(context.Background(), rc, ns, ms, ls, variants, *out, *commit, *appendTo)
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rc runConfig, ns, ms []int, ls []float64, variants []string, out, commit string, appendTo bool) error {
	if slices.Max(ms) > maxServices {
		return fmt.Errorf("at most %d Services (the NodePort range)", maxServices)
	}
	for _, bin := range []string{rc.outriggerBin, rc.upstreamBin} {
		if _, err := os.Stat(bin); err != nil && (bin == rc.outriggerBin && slices.ContainsFunc(variants, func(v string) bool { return !isUpstream(v) }) || bin == rc.upstreamBin && slices.ContainsFunc(variants, isUpstream)) {
			return fmt.Errorf("%s: %w (make bin/outrigger-ccm bin/upstream-ccm)", bin, err)
		}
	}
	for _, e := range etcdEnv {
		if err := os.Setenv(e[0], e[1]); err != nil {
			return err
		}
	}
	res := &Results{
		Command: "bench/scale " + strings.Join(os.Args[1:], " "),
		Commit:  commit,
		Setup: Setup{
			CloudLatency: rc.latency.String(), Refresh: rc.refresh.String(), IdlePeriods: rc.idlePeriods,
			Bound: rc.bound.String(), Churn: rc.churn, UpstreamTuned: upstreamTunedFlags,
		},
	}
	for _, a := range apiServerArgs {
		res.Setup.APIServerArgs = append(res.Setup.APIServerArgs, "--"+a[0]+"="+a[1])
	}
	for _, e := range etcdEnv {
		res.Setup.Etcd = append(res.Setup.Etcd, e[0]+"="+e[1])
	}
	if appendTo {
		var err error
		if res, err = appendResults(filepath.Join(out, "scale.json"), res); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if _, ok := res.serviceReference(m); ok {
			progress("API server creating %d Services: measured before in this set", m)
			continue
		}
		ref, err := runServiceReference(ctx, rc, m)
		if err != nil {
			return err
		}
		progress("API server creating %d Services: %.1f s, %.1f s with a CCM's two writes for each", m, ref.Seconds, ref.WithWritesSeconds)
		res.ServiceReferences = append(res.ServiceReferences, ref)
	}
	for _, n := range ns {
		if slices.ContainsFunc(res.References, func(r Reference) bool { return r.Nodes == n }) {
			progress("API server write limit, %d nodes: measured before in this set", n)
		} else {
			ref, err := runReference(ctx, rc, n)
			if err != nil {
				return err
			}
			progress("API server write limit, %d nodes: %.1f s", n, ref.Seconds)
			res.References = append(res.References, ref)
		}
		if err := write(out, res); err != nil {
			return err
		}
		for _, m := range ms {
			for _, l := range ls {
				for _, ccm := range variants {
					row, err := runRow(ctx, rc, n, m, l, ccm)
					if err != nil {
						return fmt.Errorf("%s, %d nodes, %d Services, limit %s: %w", ccm, n, m, limitName(l), err)
					}
					res.Rows = append(res.Rows, row)
					if err := write(out, res); err != nil {
						return err
					}
				}
			}
		}
	}
	fmt.Print(res.Markdown())
	return nil
}

// appendResults is the results file at path with this run's command added,
// refused unless it measured the same commit with the same setup.
func appendResults(path string, res *Results) (*Results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-append: %w", err)
	}
	var old Results
	if err := json.Unmarshal(raw, &old); err != nil {
		return nil, fmt.Errorf("-append: %s: %w", path, err)
	}
	if old.Commit != res.Commit {
		return nil, fmt.Errorf("-append: %s measured commit %s, this run measures %s: one set of figures is one commit", path, old.Commit, res.Commit)
	}
	a, _ := json.Marshal(old.Setup)
	b, _ := json.Marshal(res.Setup)
	if string(a) != string(b) {
		return nil, fmt.Errorf("-append: %s has another setup:\n%s\nthis run:\n%s", path, a, b)
	}
	old.Command += "; " + res.Command
	return &old, nil
}

// write writes the results file, the tables and the pictures into dir.
func write(dir string, res *Results) error {
	// Pieces of one set (-append) may come in any order: the tables go
	// by cloud limit, nodes, Services and variant.
	slices.SortStableFunc(res.References, func(a, b Reference) int { return cmp.Compare(a.Nodes, b.Nodes) })
	slices.SortStableFunc(res.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.CloudLimit, b.CloudLimit), cmp.Compare(a.Nodes, b.Nodes), cmp.Compare(a.Services, b.Services),
			cmp.Compare(slices.Index(ccmOrder, a.CCM), slices.Index(ccmOrder, b.CCM)))
	})
	res.Fits = fits(res.Rows)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	files := map[string]string{"scale.json": string(raw) + "\n", "scale.md": res.Markdown()}
	for _, c := range charts {
		files[c.file] = c.svg(res)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func isUpstream(ccm string) bool { return ccm == upstreamTuned || ccm == upstreamDefaults }

func parseCCMs(s string) ([]string, error) {
	var out []string
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(ccmOrder, c) {
			return nil, fmt.Errorf("bad -ccms entry %q: %s", c, strings.Join(ccmOrder, ", "))
		}
		out = append(out, c)
	}
	return out, nil
}

func ints(s, name string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad %s entry %q", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("bad -limits entry %q: calls per second, 0 for none", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// gitCommit is the working directory's commit, if it is a git checkout.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
