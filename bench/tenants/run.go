package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// ccm is one way of serving the tenants.
type ccm struct {
	key, name string
	// replicas of Outrigger in tenant mode; 0: one upstream CCM per tenant.
	replicas int
}

var ccms = map[string]ccm{
	"outrigger":   {key: "outrigger", name: "Outrigger, 1 replica", replicas: 1},
	"outrigger-3": {key: "outrigger-3", name: "Outrigger, 3 replicas", replicas: 3},
	"upstream":    {key: "upstream", name: "upstream CCM, 1 per tenant"},
}

// row is one CCM's figures at one tenant count.
type row struct {
	tenants int
	ccm     ccm
	// processes is how many CCM processes served the tenants.
	processes int
	// converge: from the processes' start to every tenant's nodes
	// initialized.
	converge time.Duration
	// rssIdle is the processes' resident memory summed, after the idle
	// window; rssPeak their peak resident memory summed, after the churn.
	rssIdle, rssPeak float64
	// cpuIdle is the processes' CPU over the idle window, in cores.
	cpuIdle float64
	// churn: every tenant at once registers nodes and creates Services;
	// the time until all are served, the CPU the processes used for it,
	// the calls the cloud took and those it refused (429).
	churn                    time.Duration
	cpuChurn                 float64
	callsChurn, refusedChurn int64
	refusedTotal             int64
	newTenant                time.Duration
	failover                 time.Duration
	failoverTenants          int
}

// process is one CCM process and the tenants it was started for.
type process struct {
	*benchenv.Process
	id string
}

// runOne serves n tenants (of w, whose last tenant joins later) with c and
// measures it, on a sim cloud of its own that accepts cfg.qps calls a
// second.
func runOne(ctx context.Context, cfg config, w *world, n int, c ccm) (row, error) {
	r := row{tenants: n, ccm: c}
	if err := w.reset(ctx); err != nil {
		return r, err
	}
	runCtx, stop := context.WithCancel(ctx)
	var procs []*process
	defer func() {
		stop()
		for _, p := range procs {
			if err := <-p.Done; err != nil {
				progress("%s exited: %v", p.id, err)
			}
		}
	}()

	cloud, url, err := serveCloud(runCtx, cfg)
	if err != nil {
		return r, err
	}
	cloudConfig := func(i int) []byte {
		return fmt.Appendf(nil, "endpoint: %s\ncaller: %s\n", url, tenantName(i))
	}
	// Every tenant's first nodes, the late tenant's included, are
	// instances before the CCMs start; the late tenant's register when it
	// joins.
	nodes := make([][]string, n+1)
	for i := range n + 1 {
		for j := range cfg.nodes {
			name := fmt.Sprintf("%s-%d-%s-n%d", c.key, n, tenantName(i), j)
			if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
				return r, err
			}
			nodes[i] = append(nodes[i], name)
		}
	}
	for i := range n {
		for _, name := range nodes[i] {
			if err := kubeletsim.Register(ctx, w.tenants[i].client, name); err != nil {
				return r, err
			}
		}
	}

	// Leader election as in production (upstream's defaults), under a
	// name of this run's own, so that no run waits out another's Lease.
	common := []string{"--cloud-provider=sim", "--secure-port=0", "--configure-cloud-routes=false", "--leader-elect-resource-name=bench-" + c.key}
	start := func(i int) error {
		p := &process{}
		var args []string
		bin := cfg.outriggerBin
		if c.replicas > 0 {
			p.id = fmt.Sprintf("replica-%d", i+1)
			args = append(common, "--kubeconfig="+w.mgmt.kubeconfig, "--tenants-namespace="+tenantsNamespace,
				"--tenants-selector="+benchLabel, "--tenants-replica-id="+p.id,
				fmt.Sprintf("--cloud-qps=%g", cfg.qps))
		} else {
			p.id = tenantName(i)
			file := filepath.Join(w.dir, fmt.Sprintf("%s-%s.yaml", c.key, p.id))
			if err := os.WriteFile(file, cloudConfig(i), 0o600); err != nil {
				return err
			}
			bin = cfg.upstreamBin
			args = append(common, "--kubeconfig="+w.tenants[i].kubeconfig, "--cloud-config="+file)
		}
		proc, err := benchenv.StartProcess(runCtx, bin, args, fmt.Sprintf("tenants-%d-%s-%s.log", n, c.key, p.id))
		if err != nil {
			return err
		}
		p.Process = proc
		procs = append(procs, p)
		return nil
	}
	if c.replicas > 0 {
		for i := range n {
			if err := w.putSecret(ctx, w.tenants[i], cloudConfig(i)); err != nil {
				return r, err
			}
		}
	}
	t0 := time.Now()
	count := c.replicas
	if count == 0 {
		count = n
	}
	for i := range count {
		if err := start(i); err != nil {
			return r, err
		}
	}
	r.processes = len(procs)
	if !waitFor(ctx, cfg.bound, func() bool { return servedAll(w, nodes[:n], nil) }) {
		return r, fmt.Errorf("%s: the tenants' nodes not initialized within %s", c.name, cfg.bound)
	}
	r.converge = time.Since(t0)
	progress("%s, %d tenants: converged in %s", c.name, n, r.converge.Round(10*time.Millisecond))

	// Idle: nothing changes; what the processes spend is their watches,
	// resyncs and Leases.
	cpu0, err := cpuSeconds(procs)
	if err != nil {
		return r, err
	}
	if !sleep(ctx, cfg.idle) {
		return r, ctx.Err()
	}
	cpu1, err := cpuSeconds(procs)
	if err != nil {
		return r, err
	}
	r.cpuIdle = (cpu1 - cpu0) / cfg.idle.Seconds()
	if r.rssIdle, err = memory(procs, (*benchenv.Process).RSS); err != nil {
		return r, err
	}

	// Churn: every tenant at once registers nodes and creates Services.
	calls0 := cloud.Calls()
	every := make([]int, n)
	for i := range every {
		every[i] = i
	}
	if r.churn, err = runChurn(ctx, cfg, w, cloud, every, fmt.Sprintf("%s-%d", c.key, n)); err != nil {
		return r, fmt.Errorf("%s: %w", c.name, err)
	}
	cpu2, err := cpuSeconds(procs)
	if err != nil {
		return r, err
	}
	r.cpuChurn = cpu2 - cpu1
	calls1 := cloud.Calls()
	r.callsChurn = calls1.Total - calls0.Total - (calls1.Throttled - calls0.Throttled)
	r.refusedChurn = calls1.Throttled - calls0.Throttled
	progress("%s, %d tenants: churn served in %s, %d calls, %d refused", c.name, n, r.churn.Round(10*time.Millisecond), r.callsChurn, r.refusedChurn)

	// The peak so far: the same processes as the idle figure (the new
	// tenant's own CCM is not one of them yet).
	if r.rssPeak, err = memory(procs, (*benchenv.Process).PeakRSS); err != nil {
		return r, err
	}

	// A new tenant: its nodes are registered, then it is named to
	// Outrigger (its Secret) or its own CCM starts.
	late := w.tenants[n]
	for _, name := range nodes[n] {
		if err := kubeletsim.Register(ctx, late.client, name); err != nil {
			return r, err
		}
	}
	t2 := time.Now()
	if c.replicas > 0 {
		err = w.putSecret(ctx, late, cloudConfig(n))
	} else {
		err = start(n)
	}
	if err != nil {
		return r, err
	}
	if !waitFor(ctx, cfg.bound, func() bool { return late.served(nodes[n], nil) == len(nodes[n]) }) {
		return r, fmt.Errorf("%s: the new tenant's nodes not initialized within %s", c.name, cfg.bound)
	}
	r.newTenant = time.Since(t2)

	if c.replicas > 1 {
		if err := failover(ctx, cfg, w, n, c, cloud, procs, &r); err != nil {
			return r, err
		}
	}
	r.refusedTotal = cloud.Calls().Throttled
	return r, nil
}

// failover kills (SIGKILL) the replica holding the most tenants, registers
// a node in each of them, and times until those nodes are initialized: the
// others take the tenants once their Leases expire.
func failover(ctx context.Context, cfg config, w *world, n int, c ccm, cloud *simcloud.Cloud, procs []*process, r *row) error {
	held, err := w.holders(ctx)
	if err != nil {
		return err
	}
	victim := slices.MaxFunc(procs, func(a, b *process) int { return len(held[a.id]) - len(held[b.id]) })
	orphans := held[victim.id]
	if len(orphans) == 0 {
		return fmt.Errorf("no replica holds a tenant: %v", held)
	}
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	t3 := time.Now()
	added := map[*cluster][]string{}
	for _, t := range orphans {
		i := slices.IndexFunc(w.tenants, func(c *cluster) bool { return c.name == t })
		if i < 0 {
			return fmt.Errorf("a Lease names tenant %q, not one of the benchmark's", t)
		}
		name := fmt.Sprintf("%s-%d-%s-f", c.key, n, t)
		if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
			return err
		}
		if err := kubeletsim.Register(ctx, w.tenants[i].client, name); err != nil {
			return err
		}
		added[w.tenants[i]] = []string{name}
	}
	if !waitFor(ctx, cfg.bound, func() bool {
		for cl, names := range added {
			if cl.served(names, nil) < len(names) {
				return false
			}
		}
		return true
	}) {
		return fmt.Errorf("%s: the killed replica's tenants not served again within %s", c.name, cfg.bound)
	}
	r.failover = time.Since(t3)
	r.failoverTenants = len(orphans)
	progress("%s, %d tenants: a killed replica's %d tenants served again in %s", c.name, n, len(orphans), r.failover.Round(10*time.Millisecond))
	return nil
}

// churn registers a tenant's nodes and creates its Services.
func churn(ctx context.Context, c *cluster, nodes, services []string) error {
	for _, name := range nodes {
		if err := kubeletsim.Register(ctx, c.client, name); err != nil {
			return err
		}
	}
	for _, name := range services {
		if _, err := c.client.CoreV1().Services("default").Create(ctx, benchenv.LoadBalancerService(name), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: creating Service %s: %w", c.name, name, err)
		}
	}
	return nil
}

// servedAll reports whether every tenant's nodes are initialized and its
// Services have an ingress point (nodes and services indexed by tenant).
func servedAll(w *world, nodes, services [][]string) bool {
	for i, names := range nodes {
		var svcs []string
		if i < len(services) {
			svcs = services[i]
		}
		if w.tenants[i].served(names, svcs) < len(names)+len(svcs) {
			return false
		}
	}
	return true
}

func cpuSeconds(procs []*process) (float64, error) {
	total := 0.0
	for _, p := range procs {
		s, err := p.CPUSeconds()
		if err != nil {
			return 0, err
		}
		total += s
	}
	return total, nil
}

// memory sums read (resident or peak resident memory, MiB) over procs.
func memory(procs []*process, read func(*benchenv.Process) (float64, error)) (float64, error) {
	total := 0.0
	for _, p := range procs {
		m, err := read(p.Process)
		if err != nil {
			return 0, err
		}
		total += m
	}
	return total, nil
}

// waitFor polls cond every 20 ms until it holds (true) or bound passes.
func waitFor(ctx context.Context, bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// sleep is the idle window: the one place the benchmark waits for time,
// since idleness is a span of time.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// serveCloud serves a sim cloud of the run's own on loopback until ctx
// ends: the account of cfg.qps calls a second, cfg.latency a call.
func serveCloud(ctx context.Context, cfg config) (*simcloud.Cloud, string, error) {
	cloud := simcloud.New("")
	url, err := cloud.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	cloud.SetSettings(simcloud.Settings{RateLimit: cfg.qps, Latency: simcloud.Duration{Duration: cfg.latency}})
	return cloud, url, nil
}

// runChurn has each of the tenants (indexes into w.tenants) at once
// register cfg.churnNodes nodes (their instances made first, named after
// prefix) and create cfg.churnServices LoadBalancer Services, and times
// until all are served.
func runChurn(ctx context.Context, cfg config, w *world, cloud *simcloud.Cloud, tenants []int, prefix string) (time.Duration, error) {
	nodes, services := make([][]string, len(w.tenants)), make([][]string, len(w.tenants))
	for _, i := range tenants {
		for j := range cfg.churnNodes {
			name := fmt.Sprintf("%s-%s-c%d", prefix, tenantName(i), j)
			if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
				return 0, err
			}
			nodes[i] = append(nodes[i], name)
		}
		for j := range cfg.churnServices {
			services[i] = append(services[i], fmt.Sprintf("lb-%d", j))
		}
	}
	start := time.Now()
	errs := make(chan error, len(tenants))
	for _, i := range tenants {
		go func() { errs <- churn(ctx, w.tenants[i], nodes[i], services[i]) }()
	}
	for range tenants {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	if !waitFor(ctx, cfg.bound, func() bool { return servedAll(w, nodes, services) }) {
		return 0, fmt.Errorf("the churn not served within %s", cfg.bound)
	}
	return time.Since(start), nil
}
