// Command tenants measures what serving many clusters costs: for each
// tenant count, a management cluster and a control plane per tenant (each
// its own etcd and kube-apiserver), served by one Outrigger in tenant
// mode, by three Outrigger replicas sharing the tenants by Leases, and by
// one upstream cloud-controller-manager per tenant, as hosted control
// planes run them today. All on the same sim cloud account, which accepts
// -qps calls a second and answers 429 beyond (Outrigger is given the
// account's limit, --cloud-qps, as its users would; the upstream CCMs have
// no such flag).
//
//	go run ./bench/tenants -tenants 1,10,25
//
// For each CCM: the time until every tenant's nodes are initialized; the
// processes' resident memory and CPU over an idle window; a churn (every
// tenant at once registers -churn-nodes nodes and creates -churn-services
// LoadBalancer Services) timed until served, with the CPU it took and the
// cloud calls made and refused; a tenant added (its Secret, or its own CCM
// started) timed until its nodes are initialized; with replicas, the one
// holding most tenants killed (SIGKILL) and the time until a node
// registered in each of its tenants is initialized by the others. The
// tables go to -out (markdown) and stdout.
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
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

type config struct {
	upstreamBin, outriggerBin        string
	nodes, churnNodes, churnServices int
	// isolation is the tenant count at which one tenant is broken each
	// way (brokenWays) under one Outrigger; 0: none.
	isolation            int
	qps                  float64
	latency, idle, bound time.Duration
}

func main() {
	var cfg config
	countList := flag.String("tenants", "1,10,25", "comma-separated tenant counts")
	which := flag.String("ccms", "outrigger,outrigger-3,upstream", "the ways of serving the tenants, in order")
	flag.IntVar(&cfg.nodes, "nodes", 10, "nodes of each tenant when the CCMs start")
	flag.IntVar(&cfg.churnNodes, "churn-nodes", 20, "nodes each tenant registers in the churn")
	flag.IntVar(&cfg.churnServices, "churn-services", 20, "LoadBalancer Services each tenant creates in the churn")
	flag.Float64Var(&cfg.qps, "qps", 100, "calls a second the cloud account accepts (429 beyond); Outrigger's --cloud-qps")
	flag.DurationVar(&cfg.latency, "cloud-latency", 10*time.Millisecond, "latency of every cloud call")
	flag.DurationVar(&cfg.idle, "idle", 30*time.Second, "the idle window over which CPU is measured")
	flag.DurationVar(&cfg.bound, "bound", 5*time.Minute, "the longest any step is waited for")
	flag.StringVar(&cfg.upstreamBin, "upstream", "bin/upstream-ccm", "the upstream CCM binary (make bin/upstream-ccm)")
	flag.StringVar(&cfg.outriggerBin, "outrigger-bin", "bin/outrigger-ccm", "Outrigger with the benchmark providers (make bin/outrigger-ccm)")
	flag.IntVar(&cfg.isolation, "isolation", 10, "at this tenant count (one of -tenants), also break the first tenant each way under one Outrigger and time the others; 0: do not")
	out := flag.String("out", "docs/performance/tenants.md", "where the tables are written")
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var counts []int
	for _, s := range strings.Split(*countList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatal(fmt.Errorf("-tenants %q: want counts of at least 1", s))
		}
		counts = append(counts, n)
	}
	var order []ccm
	for _, k := range strings.Split(*which, ",") {
		c, ok := ccms[k]
		if !ok {
			fatal(fmt.Errorf("-ccms: unknown %q (outrigger, outrigger-3, upstream)", k))
		}
		order = append(order, c)
	}
	rows, isolation, err := measure(ctx, cfg, counts, order)
	if err != nil {
		fatal(err)
	}
	table := render(cfg, rows) + renderIsolation(cfg, isolation)
	fmt.Print(table)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
		fatal(err)
	}
}

// measure runs every CCM of order at every tenant count, on one world per
// count.
func measure(ctx context.Context, cfg config, counts []int, order []ccm) ([]row, []isolationRow, error) {
	var rows []row
	var isolation []isolationRow
	for _, n := range counts {
		progress("%d tenants: starting %d control planes", n, n+2)
		w, err := startWorld(ctx, n+1)
		if err != nil {
			return rows, isolation, err
		}
		for _, c := range order {
			progress("%d tenants: %s", n, c.name)
			r, err := runOne(ctx, cfg, w, n, c)
			if err != nil {
				w.close()
				return rows, isolation, fmt.Errorf("%d tenants, %s: %w", n, c.name, err)
			}
			rows = append(rows, r)
		}
		if n == cfg.isolation {
			for _, way := range brokenWays {
				progress("one of %d tenants: %s", n, way)
				r, err := runBroken(ctx, cfg, w, n, way)
				if err != nil {
					w.close()
					return rows, isolation, err
				}
				isolation = append(isolation, r)
			}
		}
		w.close()
	}
	return rows, isolation, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s tenants: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "tenants:", err)
	os.Exit(1)
}
