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
