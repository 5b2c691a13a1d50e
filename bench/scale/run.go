package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// apiServerArgs configure kube-apiserver as a large cluster's: more
// requests in flight (the two limits are summed into priority and
// fairness's total concurrency, 600 by default), the watch cache on for
// every resource (its sizes follow the load since 1.25: the only size
// --watch-cache-sizes still honours is 0, off), and a NodePort range
// that holds 20,000 LoadBalancer Services (each takes a NodePort; the
// default range holds 2,768).
var apiServerArgs = [][2]string{
	{"max-requests-inflight", "3000"},
	{"max-mutating-requests-inflight", "1000"},
	{"watch-cache", "true"},
	{"service-node-port-range", "30000-49999"},
}

// maxServices is what the NodePort range above holds.
const maxServices = 20000

// etcdEnv configures etcd through its environment (envtest starts it with
// the benchmark's): the backend quota at 8 GiB, etcd's suggested maximum,
// instead of the 2 GiB default.
var etcdEnv = [][2]string{{"ETCD_QUOTA_BACKEND_BYTES", "8589934592"}}

// upstreamTunedFlags make the upstream CCM's node and Service controllers
// as parallel as Outrigger's defaults.
var upstreamTunedFlags = append(slices.Clone(benchenv.UpstreamTuned), "--concurrent-service-syncs=64")

type runConfig struct {
	latency      time.Duration
	refresh      time.Duration
	idlePeriods  int
	bound        time.Duration
	churn        int
	outriggerBin string
	upstreamBin  string
	// provisionOnly ends each row after its load balancer phase.
	provisionOnly bool
	// profileDir, when set, receives CPU profiles of Outrigger's
	// process over the load balancer phase and the idle window.
	profileDir string
	// serviceRuns is how many times each Service reference is measured;
	// the median is kept (one run varies by a second or more at 1,000).
	serviceRuns int
}

// profile starts a CPU profile of an Outrigger row's process, named
// <phase>-<ccm>-<nodes>-<services>, and returns what ends it; it does
// nothing for the upstream CCM or without -profile.
func profile(rc runConfig, proc *benchenv.Process, ccm, phase string, n, m int) (stop func()) {
	if rc.profileDir == "" || (ccm != outrigger && ccm != outriggerPlugin) {
		return func() {}
	}
	name := fmt.Sprintf("%s-%s-%d-%d", phase, ccm, n, m)
	if err := os.WriteFile(filepath.Join(rc.profileDir, "next"), []byte(name), 0o644); err != nil {
		progress("profile %s: %v", name, err)
		return func() {}
	}
	if err := proc.Signal(syscall.SIGUSR1); err != nil {
		progress("profile %s: %v", name, err)
	}
	return func() { _ = proc.Signal(syscall.SIGUSR2) }
}

// notCCMWrites are resources whose writes the rows leave out: the
// IPAddress the API server creates for every Service, and Leases (the API
// server's own, and the CCMs' leader election, which costs the same
// whatever the cluster's size).
var notCCMWrites = []string{"ipaddresses", "leases"}

func apiWrites(ctx context.Context, client kubernetes.Interface) (int64, int64, error) {
	return benchenv.APICountsExcept(ctx, client, notCCMWrites...)
}

func startEnv(ctx context.Context) (*benchenv.Env, error) {
	var opts []apiserver.Option
	for _, a := range apiServerArgs {
		opts = append(opts, apiserver.WithAPIServerArg(a[0], a[1]))
	}
	return benchenv.Start(ctx, opts...)
}

func nodeName(i int) string { return fmt.Sprintf("scale-%06d", i) }

// register registers nodes as kubelets with --cloud-provider=external do
// (tainted uninitialized), 64 at a time, within the bound.
func register(ctx context.Context, client kubernetes.Interface, names []string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var failed atomic.Value
	workqueue.ParallelizeUntil(ctx, 64, len(names), func(i int) {
		if err := kubeletsim.Register(ctx, client, names[i]); err != nil {
			failed.Store(err)
		}
	})
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return ctx.Err()
}

// nodeTracker follows, from a watch, which nodes exist and are initialized.
type nodeTracker struct {
	mu          sync.Mutex
	initialized map[string]bool
	stop        func()
}

func trackNodes(ctx context.Context, client kubernetes.Interface) (*nodeTracker, error) {
	t := &nodeTracker{initialized: map[string]bool{}}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().Nodes().Informer()
	set := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && benchenv.Initialized(n, false) {
			t.mu.Lock()
			t.initialized[n.Name] = true
			t.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				t.mu.Lock()
				delete(t.initialized, n.Name)
				t.mu.Unlock()
			}
		},
	}); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	t.stop = func() { close(stop); factory.Shutdown() }
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.stop()
		return nil, errors.New("node informer did not sync")
	}
	return t, nil
}

// count is how many of names are initialized.
func (t *nodeTracker) count(names []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, name := range names {
		if t.initialized[name] {
			n++
		}
	}
	return n
}

// exit is a process's one exit report, readable by every wait: done closes
// once it exited, err then says how.
type exit struct {
	done chan struct{}
	err  error
}

func watchExit(report <-chan error) *exit {
	x := &exit{done: make(chan struct{})}
	go func() {
		x.err = <-report
		close(x.done)
	}()
	return x
}

// await polls cond every 100 ms until it holds (true), the deadline passes
// (false) or the CCM exits (an error).
func await(x *exit, deadline time.Time, cond func() bool) (bool, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-x.done:
			return false, fmt.Errorf("the CCM exited: %v", x.err)
		case <-tick.C:
		}
	}
	return true, nil
}

// sleep waits d unless the CCM exits first.
func sleep(x *exit, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-x.done:
		return fmt.Errorf("the CCM exited: %v", x.err)
	case <-t.C:
		return nil
	}
}

// ccmCommand is the binary and flags of a CCM variant.
// cloudConfig is the fake's, or for outrigger-plugin the grpc provider's.
func ccmCommand(rc runConfig, ccm, cloudConfig, kubeconfig string) (bin string, args, flags []string) {
	provider := upstreamfake.ProviderName
	if ccm == outriggerPlugin {
		provider = plugin.ProviderName
	}
	args = []string{"--cloud-provider=" + provider, "--cloud-config=" + cloudConfig, "--kubeconfig=" + kubeconfig,
		"--secure-port=0", "--node-status-update-frequency=" + rc.refresh.String()}
	switch ccm {
	case outrigger, outriggerPlugin:
		return rc.outriggerBin, args, nil
	case upstreamTuned:
		flags = upstreamTunedFlags
	}
	// Upstream's route controller refuses to start without a cluster CIDR:
	// the controllers Outrigger runs here.
	args = append(args, "--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller")
	return rc.upstreamBin, append(args, flags...), flags
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s scale: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runReference measures the API server's write limit for n nodes: n
// registered nodes, then the two writes that initialize each, made by the
// benchmark (benchenv.WriteOnly), timed until all are initialized.
func runReference(ctx context.Context, rc runConfig, n int) (Reference, error) {
	ref := Reference{Nodes: n}
	env, err := startEnv(ctx)
	if err != nil {
		return ref, err
	}
	defer env.Close()
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(i)
	}
	if err := register(ctx, env.Client, names, rc.bound); err != nil {
		return ref, fmt.Errorf("registering %d nodes: %w", n, err)
	}
	nodes, err := trackNodes(ctx, env.Client)
	if err != nil {
		return ref, err
	}
	defer nodes.stop()
	before, _, err := apiWrites(ctx, env.Client)
	if err != nil {
		return ref, err
	}
	writeCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	report, err := benchenv.WriteOnly(writeCtx, env.Kubeconfig)
	if err != nil {
		return ref, err
	}
	done := watchExit(report)
	defer func() { stop(); <-done.done }()
	ok, err := await(done, start.Add(rc.bound), func() bool { return nodes.count(names) == n })
	if err != nil || !ok {
		return ref, fmt.Errorf("the API server's write limit, %d nodes: not done within %s (%v)", n, rc.bound, err)
	}
	ref.Seconds = time.Since(start).Seconds()
	after, _, err := apiWrites(ctx, env.Client)
	if err != nil {
		return ref, err
	}
	ref.Writes = after - before
	return ref, nil
}

// runServiceReference times the API server creating m LoadBalancer
// Services on a fresh control plane with no nodes and no CCM, then on
// another with the writes a CCM makes for each (runServiceWritesReference):
// the median of rc.serviceRuns runs of each.
func runServiceReference(ctx context.Context, rc runConfig, m int) (ServiceReference, error) {
	ref := ServiceReference{Services: m}
	var err error
	if ref.Seconds, err = median(max(1, rc.serviceRuns), func() (float64, error) { return runServiceCreation(ctx, rc, m) }); err != nil {
		return ref, err
	}
	if ref.WithWritesSeconds, err = median(max(1, rc.serviceRuns), func() (float64, error) { return runServiceWritesReference(ctx, rc, m) }); err != nil {
		return ref, err
	}
	return ref, nil
}

// median runs measure n times and returns the median of its figures.
func median(n int, measure func() (float64, error)) (float64, error) {
	var got []float64
	for range n {
		v, err := measure()
		if err != nil {
			return 0, err
		}
		got = append(got, v)
	}
	slices.Sort(got)
	return got[len(got)/2], nil
}

// runServiceCreation times the API server creating m LoadBalancer Services
// on a fresh control plane with no nodes and no CCM.
func runServiceCreation(ctx context.Context, rc runConfig, m int) (float64, error) {
	env, err := startEnv(ctx)
	if err != nil {
		return 0, err
	}
	defer env.Close()
	start := time.Now()
	created, err := createServices(ctx, env.Client, m, rc.bound)
	if err == nil && created < int64(m) {
		err = fmt.Errorf("%d of %d created within %s", created, m, rc.bound)
	}
	if err != nil {
		return 0, fmt.Errorf("the API server creating %d Services: %w", m, err)
	}
	return time.Since(start).Seconds(), nil
}

// runServiceWritesReference times the API server creating m LoadBalancer
// Services while the benchmark itself makes, for each as it appears, the
// two writes upstream's service controller makes for a new load balancer:
// the cleanup finalizer, then the status with an ingress address (strategic
// merge patches of the status subresource, as upstream's). No CCM can
// provision the load balancers faster than this on the same API server, so
// it is the floor of the load balancer phase; a fresh control plane, no
// nodes, 64 writers.
func runServiceWritesReference(ctx context.Context, rc runConfig, m int) (float64, error) {
	env, err := startEnv(ctx)
	if err != nil {
		return 0, err
	}
	defer env.Close()
	ctx, cancel := context.WithTimeout(ctx, rc.bound)
	defer cancel()
	svcs := env.Client.CoreV1().Services("default")
	w, err := svcs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("watching Services: %w", err)
	}
	defer w.Stop()
	names := make(chan string, m)
	go func() {
		defer close(names)
		seen := 0
		for ev := range w.ResultChan() {
			// Only the benchmark's: the default namespace holds the API
			// server's own kubernetes Service too.
			if svc, ok := ev.Object.(*corev1.Service); ok && ev.Type == watch.Added && svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				names <- svc.Name
				if seen++; seen == m {
					return
				}
			}
		}
	}()
	finalizer := []byte(`{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}`)
	status := []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"198.18.0.1"}]}}}`)
	var written atomic.Int64
	var failed atomic.Pointer[error]
	writers := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(writers)
		workqueue.ParallelizeUntil(ctx, 64, 64, func(int) {
			for name := range names {
				for _, patch := range [][]byte{finalizer, status} {
					if _, err := svcs.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
						failed.CompareAndSwap(nil, &err)
						cancel()
						return
					}
				}
				written.Add(1)
			}
		})
	}()
	created, err := createServices(ctx, env.Client, m, rc.bound)
	if err != nil || created < int64(m) {
		// Fewer than m will appear: end the watch, which ends the writers.
		cancel()
		w.Stop()
	}
	<-writers
	if werr := failed.Load(); werr != nil {
		return 0, fmt.Errorf("the API server creating %d Services with two writes each: %w", m, *werr)
	}
	if err == nil && created < int64(m) {
		err = fmt.Errorf("%d of %d created within %s", created, m, rc.bound)
	}
	if err != nil {
		return 0, fmt.Errorf("the API server creating %d Services with two writes each: %w", m, err)
	}
	if n := written.Load(); n < int64(m) {
		return 0, fmt.Errorf("the API server creating %d Services with two writes each: %d written within %s", m, n, rc.bound)
	}
	return time.Since(start).Seconds(), nil
}

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
