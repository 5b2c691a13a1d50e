// One row of the table: a CCM run against n Nodes and m Services, each
// phase timed and its cloud calls and API writes counted.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
)

// runRow runs one CCM on one workload on a fresh control plane: n nodes
// registered, the CCM started (nodes phase), m LoadBalancer Services
// created (provision phase), the quiet cluster measured (idle), then churn
// nodes leave and as many join (churn phase). A phase that reaches the
// bound ends the row; the error is the harness's own.
func runRow(ctx context.Context, rc runConfig, n, m int, limit float64, ccm string) (Row, error) {
	c := min(rc.churn, n/2)
	row := Row{CloudLimit: limit, Nodes: n, Services: m, CCM: ccm, ChurnNodes: c}
	env, err := startEnv(ctx)
	if err != nil {
		return row, err
	}
	defer env.Close()
	client := env.Client
	names := make([]string, n+c)
	for i := range names {
		names[i] = nodeName(i)
	}
	initial, leaving, joining, after := names[:n], names[:c], names[n:], names[c:]
	cloudConfig := filepath.Join(env.Dir, "upstream-fake.yaml")
	stats, err := upstreamfake.WriteConfig(cloudConfig, upstreamfake.Config{
		Nodes: names, Latency: metav1.Duration{Duration: rc.latency}, RateLimit: limit, LoadBalancers: true,
	})
	if err != nil {
		return row, err
	}
	calls := upstreamfake.Counter(ctx, stats)
	if ccm == outriggerPlugin {
		// The provider is served by the benchmark's process, as a plugin
		// is by its own: it outlives the CCM's restart, not the row.
		pluginCtx, stopPlugin := context.WithCancel(ctx)
		defer stopPlugin()
		if cloudConfig, err = benchenv.ServePlugin(pluginCtx, cloudConfig, upstreamfake.New); err != nil {
			return row, err
		}
	}
	if err := register(ctx, client, initial, rc.bound); err != nil {
		return row, fmt.Errorf("registering %d nodes: %w", n, err)
	}
	nodes, err := trackNodes(ctx, client)
	if err != nil {
		return row, err
	}
	defer nodes.stop()
	var withIngress atomic.Int64
	stopIngress, err := benchenv.WatchIngress(ctx, client, &withIngress)
	if err != nil {
		return row, err
	}
	defer stopIngress()

	// Nodes.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	bin, args, flags := ccmCommand(rc, ccm, cloudConfig, env.Kubeconfig)
	row.Flags = flags
	writes0, _, err := apiWrites(ctx, client)
	if err != nil {
		return row, err
	}
	endProfile := func() {}
	if rc.profileDir != "" && (ccm == outrigger || ccm == outriggerPlugin) {
		// bench/outrigger-ccm starts this profile as it starts.
		if err := os.WriteFile(filepath.Join(rc.profileDir, "next"), fmt.Appendf(nil, "nodes-%s-%d-%d", ccm, n, m), 0o644); err != nil {
			return row, err
		}
	}
	start := time.Now()
	proc, err := benchenv.StartProcess(runCtx, bin, args, fmt.Sprintf("scale-%s-%d-%d-%.0f.log", ccm, n, m, limit))
	if err != nil {
		return row, err
	}
	if rc.profileDir != "" && (ccm == outrigger || ccm == outriggerPlugin) {
		endProfile = func() { _ = proc.Signal(syscall.SIGUSR2) }
	}
	// measure reads the first process's figures once, before the restart
	// phase stops it or the row ends.
	measured := false
	measure := func(r *Row) {
		if measured {
			return
		}
		measured = true
		r.PeakRSSMiB, _ = proc.PeakRSS()
		r.CPUSeconds, _ = proc.CPUSeconds()
	}
	// The next row starts once this CCM has exited (on the interrupt, or
	// killed 15 s after it).
	done := watchExit(proc.Done)
	defer func() { stop(); <-done.done }()
	row.NodeInit = Phase{Ran: true, Want: n}
	ok, err := await(done, start.Add(rc.bound), func() bool { return nodes.count(initial) == n })
	row.NodeInit.Seconds, row.NodeInit.Done, row.NodeInit.Finished = time.Since(start).Seconds(), nodes.count(initial), ok
	initialized := time.Now()
	endProfile()
	c0 := calls()
	row.NodeInit.count(upstreamfake.Calls{}, c0, nil)
	writes1, _, werr := apiWrites(ctx, client)
	if werr != nil {
		return row, werr
	}
	row.NodeInit.Writes = writes1 - writes0
	progress("%s, %d nodes, %d Services, limit %s: nodes %s s", ccm, n, m, limitName(limit), row.NodeInit.seconds())
	if err != nil || !ok {
		return endRow(row, err, measure), nil
	}

	// Load balancers.
	row.Provision = Phase{Ran: true, Want: m}
	start = time.Now()
	endProfile = profile(rc, proc, ccm, "lb", n, m)
	created, err := createServices(ctx, client, m, rc.bound)
	if err != nil {
		return row, err
	}
	createdAfter, atCreated := time.Since(start), withIngress.Load()
	half := time.Duration(0)
	ok, err = await(done, start.Add(rc.bound), func() bool {
		n := withIngress.Load()
		if half == 0 && n >= int64(m)/2 {
			half = time.Since(start)
		}
		return n >= int64(m)
	})
	endProfile()
	progress("%s: Services created in %.1f s (%d with an address then), half with an address at %.1f s", ccm, createdAfter.Seconds(), atCreated, half.Seconds())
	row.Provision.Seconds, row.Provision.Done, row.Provision.Finished = time.Since(start).Seconds(), int(withIngress.Load()), ok
	c1 := calls()
	row.Provision.count(c0, c1, lbOps)
	writes2, _, werr := apiWrites(ctx, client)
	if werr != nil {
		return row, werr
	}
	row.Provision.Writes = writes2 - writes1 - created
	progress("%s, %d nodes, %d Services, limit %s: load balancers %s s", ccm, n, m, limitName(limit), row.Provision.seconds())
	if err != nil || !ok || rc.provisionOnly {
		return endRow(row, err, measure), nil
	}

	// Idle: from two refresh periods after the last node was initialized
	// (a pass skips the nodes initialized within its period, so the first
	// pass that asks about every node starts one period later), and at
	// least one period after the load balancers, over idlePeriods periods.
	if err := sleep(done, max(rc.refresh, time.Until(initialized.Add(2*rc.refresh)))); err != nil {
		return endRow(row, err, measure), nil
	}
	i0 := calls()
	cpu0, _ := proc.CPUSeconds()
	iw0, _, werr := apiWrites(ctx, client)
	if werr != nil {
		return row, werr
	}
	endProfile = profile(rc, proc, ccm, "idle", n, m)
	if err := sleep(done, time.Duration(rc.idlePeriods)*rc.refresh); err != nil {
		return endRow(row, err, measure), nil
	}
	endProfile()
	i1 := calls()
	cpu1, _ := proc.CPUSeconds()
	iw1, _, werr := apiWrites(ctx, client)
	if werr != nil {
		return row, werr
	}
	row.Idle = &Idle{
		CallsPerPeriod:  float64(i1.Total-i0.Total) / float64(rc.idlePeriods),
		WritesPerPeriod: float64(iw1-iw0) / float64(rc.idlePeriods),
		CPUPerPeriod:    (cpu1 - cpu0) / float64(rc.idlePeriods),
	}
	progress("%s, %d nodes, %d Services, limit %s: idle %.1f calls per period", ccm, n, m, limitName(limit), row.Idle.CallsPerPeriod)

	// Churn: c nodes leave and c join at once; done when every joining
	// node is initialized and every load balancer's backends are the
	// nodes that remain.
	want := upstreamfake.BackendKey(after)
	row.Churn = Phase{Ran: true, Want: m}
	start = time.Now()
	if err := churn(ctx, client, leaving, joining, rc.bound); err != nil {
		return row, err
	}
	converged := 0
	ok, err = await(done, start.Add(rc.bound), func() bool {
		converged = int(calls().Backends[want])
		return converged == m && nodes.count(joining) == len(joining)
	})
	row.Churn.Seconds, row.Churn.Done, row.Churn.Finished = time.Since(start).Seconds(), converged, ok
	c2 := calls()
	row.Churn.count(i1, c2, nil)
	writes3, _, werr := apiWrites(ctx, client)
	if werr != nil {
		return row, werr
	}
	row.Churn.Writes = writes3 - iw1 - int64(2*c)
	progress("%s, %d nodes, %d Services, limit %s: churn %s s", ccm, n, m, limitName(limit), row.Churn.seconds())
	if err != nil || !ok {
		return endRow(row, err, measure), nil
	}

	// Restart: the CCM stopped (its figures read first) and started again,
	// as a new leader starts; the clock runs from the new process's start
	// until it has ensured every load balancer once more. Neither CCM keeps
	// what it applied across a restart: it ensures each Service's load
	// balancer again, one EnsureLoadBalancer each.
	measure(&row)
	stop()
	<-done.done
	c2Restart := calls()
	restartCtx, stopRestart := context.WithCancel(ctx)
	defer stopRestart()
	row.Restart = Phase{Ran: true, Want: m}
	start = time.Now()
	proc, err = benchenv.StartProcess(restartCtx, bin, args, fmt.Sprintf("scale-%s-%d-%d-%.0f-restart.log", ccm, n, m, limit))
	if err != nil {
		return row, err
	}
	restarted := watchExit(proc.Done)
	defer func() { stopRestart(); <-restarted.done }()
	// The provider lives in the CCM's process, which counts from 0, or in
	// the plugin, which goes on counting.
	var before upstreamfake.Calls
	if ccm == outriggerPlugin {
		before = c2Restart
	}
	ensured := 0
	ok, err = await(restarted, start.Add(rc.bound), func() bool {
		now := calls()
		if row.RestartFirstCall == 0 && now.Total > before.Total {
			row.RestartFirstCall = time.Since(start).Seconds()
		}
		ensured = int(now.ByOp["EnsureLoadBalancer"] - before.ByOp["EnsureLoadBalancer"])
		return ensured >= m
	})
	row.Restart.Seconds, row.Restart.Done, row.Restart.Finished = time.Since(start).Seconds(), min(ensured, m), ok
	row.Restart.count(before, calls(), nil)
	progress("%s, %d nodes, %d Services, limit %s: restart %s s (first call %.1f s)", ccm, n, m, limitName(limit), row.Restart.seconds(), row.RestartFirstCall)
	if err != nil {
		row.Error = err.Error()
	}
	return row, nil
}

// lbOps are the load balancer calls.
var lbOps = []string{"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted"}

// count records the calls between two readings of the cloud's counts:
// those of ops in Calls and Throttled, every call when ops is nil.
func (p *Phase) count(before, after upstreamfake.Calls, ops []string) {
	p.ByOp, p.ThrottledByOp = diff(before.ByOp, after.ByOp), diff(before.ThrottledByOp, after.ThrottledByOp)
	p.BackendWrites = after.BackendWrites - before.BackendWrites
	if ops == nil {
		p.Calls, p.Throttled = after.Total-before.Total, after.Throttled-before.Throttled
		return
	}
	p.Calls, p.Throttled = 0, 0
	for _, op := range ops {
		p.Calls += p.ByOp[op]
		p.Throttled += p.ThrottledByOp[op]
	}
}

// diff is after - before, per key, without the zeros.
func diff(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// endRow records the CCM's peak RSS and CPU time (measure reads them while
// it runs) and why the row ended early, if it exited.
func endRow(row Row, err error, measure func(*Row)) Row {
	measure(&row)
	if err != nil {
		row.Error = err.Error()
	}
	return row
}

// createServices creates m LoadBalancer Services, 64 at a time, within the
// bound; it returns how many it created. Those the bound leaves uncreated
// are no error: the load balancer phase then ends at its bound, with the
// figure reached.
func createServices(ctx context.Context, client kubernetes.Interface, m int, bound time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var created atomic.Int64
	var failed atomic.Pointer[error]
	workqueue.ParallelizeUntil(ctx, 64, m, func(i int) {
		if _, err := client.CoreV1().Services("default").Create(ctx, benchenv.LoadBalancerService(fmt.Sprintf("lb-%05d", i)), metav1.CreateOptions{}); err != nil {
			if ctx.Err() == nil {
				failed.CompareAndSwap(nil, &err)
			}
			return
		}
		created.Add(1)
	})
	if err := failed.Load(); err != nil {
		return created.Load(), fmt.Errorf("creating Services: %w", *err)
	}
	return created.Load(), nil
}

// churn deletes the leaving nodes and registers the joining ones, both at
// once, 64 at a time each, within the bound.
func churn(ctx context.Context, client kubernetes.Interface, leaving, joining []string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- register(ctx, client, joining, bound) }()
	go func() {
		var failed atomic.Value
		workqueue.ParallelizeUntil(ctx, 64, len(leaving), func(i int) {
			if err := client.CoreV1().Nodes().Delete(ctx, leaving[i], metav1.DeleteOptions{}); err != nil {
				failed.Store(err)
			}
		})
		err, _ := failed.Load().(error)
		errs <- err
	}()
	var all []error
	for range 2 {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	if len(all) > 0 {
		return fmt.Errorf("churning nodes: %w", errors.Join(all...))
	}
	return nil
}
