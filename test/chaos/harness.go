package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// Config bounds a run.
type Config struct {
	Seed     uint64
	Duration time.Duration
	// Nodes and Services exist before the first fault.
	Nodes, Services int
	// Replicas of Outrigger, with leader election. Default 2.
	Replicas int
	// Outrigger is the binary the replicas run (a real process each, so a
	// SIGKILL is one).
	Outrigger string
	// WorkDir receives the kubeconfig, cloud-config and every process's
	// log. Default: a temporary directory, removed after a clean run.
	WorkDir string
	// Quiesce bounds the wait for every invariant to hold after the last
	// fault. Default 5m.
	Quiesce time.Duration
	// Log receives one line per step and fault.
	Log io.Writer
	// Failover, when positive, makes this a failover run: instead of the
	// fault schedule, the leader is SIGKILLed this many times while the
	// workload runs, and the time to a new leader is measured. Replicas
	// default to 3 and the leader-election timings to upstream's defaults;
	// the workload is a schedule of Duration (default Failover × 45 s),
	// cut short once the last kill is measured.
	Failover int
	// LeaseDuration, RenewDeadline and RetryPeriod are the replicas'
	// leader election. Default 4 s, 3 s, 500 ms (upstream's defaults,
	// 15 s, 10 s, 2 s, in a failover run).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Shared runs a second CCM on the same cloud and cluster:
	// SharedReplicas (default 2) Outrigger processes with
	// --load-balancer-class=example.com/not-outrigger, their own Lease and
	// only the service controller, which serve the Services of that class.
	// The schedule also SIGKILLs them (KillSharedCCM); both CCMs run the
	// orphan sweep. Neither may change or delete the other's load
	// balancers.
	Shared         bool
	SharedReplicas int
	// Hang adds ObjectHang to the schedule: the cloud never answers calls
	// on the load balancers of some Services, and the replicas abandon
	// each at --cloud-call-timeout (5 s in this setting). Services created
	// meanwhile must get their load balancer during the fault.
	Hang bool
	// LostResponses puts a proxy between the replicas and the API server
	// and adds the fault LostResponses to the schedule: a share of the
	// replicas' writes commit and their answer is lost.
	LostResponses bool
	// Plugin, when set, is the sim provider served as a plugin
	// (examples/sim-plugin built): each of Outrigger's replicas reaches
	// the cloud through its own plugin process on a unix socket, and the
	// schedule adds PluginRestart: every plugin SIGKILLed while a call is
	// in flight, and started again after the hold.
	Plugin string
	// SecondCluster runs a second cluster on the same cloud account: its
	// own etcd and kube-apiserver, SecondReplicas (default 2) Outrigger
	// replicas with every controller, routes on a cluster CIDR of its own
	// (198.18.64.0/18), and a smaller workload of its own (a quarter of
	// Nodes and Services at the start, half the pace). Both clusters keep
	// the default --cluster-name, so only the cluster ID (the kube-system
	// namespace's UID, tag cluster-id) tells their load balancers and
	// routes apart. Both run the orphan sweep every 10 s and the route
	// reconciliation every 2 s; the schedule also SIGKILLs the second
	// cluster's replicas (KillSecondCluster). Neither cluster may create,
	// change or delete a load balancer or route of the other's ID.
	SecondCluster  bool
	SecondReplicas int
}

// extraFaults are the fault kinds of the settings cfg turns on.
func (cfg Config) extraFaults() []string {
	var out []string
	if cfg.Shared {
		out = append(out, KillSharedCCM)
	}
	if cfg.Hang {
		out = append(out, ObjectHang)
	}
	if cfg.LostResponses {
		out = append(out, LostResponses)
	}
	if cfg.Plugin != "" {
		out = append(out, PluginRestart)
	}
	if cfg.SecondCluster {
		out = append(out, KillSecondCluster)
	}
	return out
}

// namespace holds the run's Services.
const namespace = "chaos"

// foreignClass is a load balancer class Outrigger does not implement:
// Services with it must get no cloud load balancer from it. In a shared
// run (Config.Shared) the second CCM serves them.
const foreignClass = "example.com/not-outrigger"

// ForeignClass is the class of the workload's Services that are not
// Outrigger's, the second CCM's in a shared run.
const ForeignClass = foreignClass

type harness struct {
	cfg Config
	// start is when the schedule starts (until then, when setting up
	// began): offsets in the log and the report count from it.
	start   atomic.Int64
	cp      *apiserver.ControlPlane
	cloud   *simcloud.Cloud
	client  kubernetes.Interface
	dir     string
	simYAML string
	kubecfg string
	// replicaKubecfg is the kubeconfig the replicas use: kubecfg, or the
	// lossy proxy's (Config.LostResponses).
	replicaKubecfg string
	proxy          *lossyProxy
	// closers stop what setUp started besides the control plane.
	closers []func()
	// nodes and services are the watch's caches, once it runs.
	nodes    cache.Store
	svcIndex cache.Indexer
	// cloudURL is the sim cloud's, as the replicas reach it.
	cloudURL string
	// id is the cluster's ID (the kube-system namespace's UID), with
	// Config.SecondCluster.
	id string
	// second is the second cluster (Config.SecondCluster).
	second *secondCluster
	// hang is the object-hang fault in progress (Config.Hang).
	hang     *hangWindow
	nextHang int

	logMu  sync.Mutex
	mu     sync.Mutex
	report *Report
	// replicas are Outrigger's, then (Config.Shared) the second CCM's,
	// then (Config.SecondCluster) the second cluster's Outrigger's.
	replicas []*replica
	// plugins are Outrigger's replicas' providers, by replica slot
	// (Config.Plugin).
	plugins []*plugin
	// pluginConfigs are the grpc provider's cloud-configs, by replica slot.
	pluginConfigs []string
	services      []string // created and not deleted, in creation order
	nextNode      int
	nextSvc       int
	created       map[string]time.Time // Service name -> creation, until it gets an ingress
	// createdForeign is created for the Services of the second CCM's class
	// (Config.Shared).
	createdForeign map[string]time.Time
	lastLift       time.Time
	closing        chan struct{} // closed by tearDown: replicas are not restarted any more
	starts         int           // replica processes started, for their caller names
}

type replica struct {
	cmd  *exec.Cmd
	done chan struct{}
	// caller names the process in the sim cloud's call log: its index and
	// incarnation.
	caller string
}

// Run starts the environment, runs the schedule of cfg.Seed, waits for
// quiescence and returns the report. An error means the harness itself
// failed (the control plane did not start, a restart failed); invariant
// violations are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Failover > 0 && len(cfg.extraFaults()) > 0 {
		return nil, errors.New("chaos: a failover run takes none of Config.Shared, Hang, LostResponses, Plugin and SecondCluster")
	}
	if cfg.Shared && cfg.SharedReplicas <= 0 {
		cfg.SharedReplicas = 2
	}
	if !cfg.Shared {
		cfg.SharedReplicas = 0
	}
	if cfg.SecondCluster && cfg.SecondReplicas <= 0 {
		cfg.SecondReplicas = 2
	}
	if !cfg.SecondCluster {
		cfg.SecondReplicas = 0
	}
	if cfg.Failover > 0 {
		if cfg.Replicas <= 0 {
			cfg.Replicas = 3
		}
		if cfg.Duration <= 0 {
			cfg.Duration = time.Duration(cfg.Failover) * 45 * time.Second
		}
		if cfg.LeaseDuration <= 0 {
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod
		}
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 2
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	}
	if cfg.Quiesce <= 0 {
		cfg.Quiesce = 5 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Outrigger == "" {
		return nil, errors.New("chaos: Config.Outrigger (the outrigger binary) is required")
	}
	sched := NewSchedule(cfg.Seed, cfg.Duration, cfg.extraFaults()...)
	h := &harness{cfg: cfg, created: map[string]time.Time{}, createdForeign: map[string]time.Time{}, report: newReport(cfg, sched), closing: make(chan struct{})}
	if cfg.Failover > 0 {
		h.report.Failover = newFailover(cfg)
		fmt.Fprintf(cfg.Log, "chaos: seed %d, failover: %d leader kills during a workload of at most %v (schedule %s: %d workload steps), lease %v, renew deadline %v, retry period %v\n",
			cfg.Seed, cfg.Failover, cfg.Duration, sched.Digest(), len(sched.Workload), cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod)
	} else {
		settings := ""
		for _, k := range cfg.extraFaults() {
			settings += ", " + k
		}
		fmt.Fprintf(cfg.Log, "chaos: seed %d, %v, schedule %s: %d workload steps, %d faults%s\n",
			cfg.Seed, cfg.Duration, sched.Digest(), len(sched.Workload), len(sched.Faults), settings)
	}
	var err error
	if h.dir = cfg.WorkDir; h.dir == "" {
		if h.dir, err = os.MkdirTemp("", "outrigger-chaos-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	h.report.WorkDir = h.dir
	// The harness's own clients log every refused connection while the
	// API server is down: to a file, not the terminal.
	if f, err := os.Create(filepath.Join(h.dir, "harness.log")); err == nil {
		defer f.Close()
		klog.LogToStderr(false)
		klog.SetOutput(f)
	}
	// The run's own log also goes to the work directory, with the
	// replicas' logs.
	if f, err := os.Create(filepath.Join(h.dir, "chaos.log")); err == nil {
		defer f.Close()
		h.cfg.Log = io.MultiWriter(cfg.Log, f)
	}
	if err := h.setUp(ctx); err != nil {
		h.tearDown()
		return nil, err
	}
	if err := h.startReplicas(ctx); err != nil {
		h.tearDown()
		return nil, err
	}
	err = h.run(ctx, sched)
	h.tearDown()
	failed := h.report.Failover != nil && len(h.report.Failover.Failures) > 0
	if err == nil && cfg.WorkDir == "" && len(h.report.Violations) == 0 && !failed {
		_ = os.RemoveAll(h.dir)
		h.report.WorkDir = ""
	}
	return h.report, err
}

// logf writes one line to Config.Log; the workload, the faults and the
// replica supervisors log concurrently.
func (h *harness) logf(format string, args ...any) {
	line := fmt.Sprintf("%7.1fs ", h.since().Seconds()) + fmt.Sprintf(format, args...) + "\n"
	h.logMu.Lock()
	defer h.logMu.Unlock()
	_, _ = io.WriteString(h.cfg.Log, line)
}

func (h *harness) setUp(ctx context.Context) error {
	h.start.Store(time.Now().UnixNano())
	h.cloud = simcloud.New("")
	// Instances' addresses on loopback: nothing here routes them, but no
	// address the run makes up lies in a private range.
	if err := h.cloud.SetInternalIPv4Range(netip.MustParsePrefix("127.1.0.0/16")); err != nil {
		return err
	}
	var err error
	if h.cfg.Shared || h.cfg.SecondCluster {
		handler := h.cloud.Handler()
		if h.cfg.Shared {
			// Every change to a load balancer is checked against the
			// class of the CCM that made it.
			handler = h.auditClasses(handler)
		}
		if h.cfg.SecondCluster {
			// And against the cluster of the replica that made it.
			handler = h.auditClusters(handler)
		}
		h.cloudURL, err = h.serve(ctx, handler)
	} else {
		h.cloudURL, err = h.cloud.Serve(ctx, "127.0.0.1:0")
	}
	if err != nil {
		return err
	}
	h.simYAML = filepath.Join(h.dir, "sim.yaml")
	if err := os.WriteFile(h.simYAML, []byte("endpoint: "+h.cloudURL+"\n"), 0o600); err != nil {
		return err
	}
	h.kubecfg = filepath.Join(h.dir, "kubeconfig")
	var id string
	if h.cp, h.client, id, err = startControlPlane(ctx, h.kubecfg); err != nil {
		return err
	}
	if h.cfg.SecondCluster {
		h.mu.Lock()
		h.id = id
		h.mu.Unlock()
	}
	h.replicaKubecfg = h.kubecfg
	if h.cfg.LostResponses {
		if err := h.startProxy(ctx); err != nil {
			return err
		}
	}
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if h.cfg.SecondCluster {
		if err := h.setUpSecond(ctx); err != nil {
			return fmt.Errorf("second cluster: %w", err)
		}
	}
	for range h.cfg.Nodes {
		if err := h.joinNode(); err != nil {
			return fmt.Errorf("initial node: %w", err)
		}
	}
	for i := range h.cfg.Services {
		if err := h.createService(ctx, uint32(i)*2654435761); err != nil {
			return fmt.Errorf("initial Service: %w", err)
		}
	}
	return nil
}

func startControlPlane(ctx context.Context, kubecfg string) (*apiserver.ControlPlane, kubernetes.Interface, string, error) {
	cp, err := apiserver.Start(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	client, id, err := func() (kubernetes.Interface, string, error) {
		if err := cp.WriteAdminKubeconfig(kubecfg); err != nil {
			return nil, "", err
		}
		cfg := rest.CopyConfig(cp.Config)
		cfg.QPS, cfg.Burst, cfg.Timeout = 200, 400, 10*time.Second
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, "", err
		}
		// The API server creates kube-system shortly after it is ready.
		var id string
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			ns, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			id = string(ns.UID)
			return true, nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("waiting for namespace kube-system: %w", err)
		}
		return client, id, nil
	}()
	if err != nil {
		_ = cp.Stop()
		return nil, nil, "", err
	}
	return cp, client, id, nil
}

// sharedLeaseName is the second CCM's leader-election Lease.
const sharedLeaseName = "outrigger-shared"

// hangCallTimeout is the replicas' --cloud-call-timeout with Config.Hang:
// well below the hang, which lasts until the caller gives up.
const hangCallTimeout = 5 * time.Second

// orphanSweepPeriod is every CCM's --load-balancer-orphan-sweep-period with
// Config.Shared or SecondCluster: each sweeps the cloud, where the other's
// load balancers are, many times a run.
const orphanSweepPeriod = 10 * time.Second

func (h *harness) tearDown() {
	close(h.closing)
	for i := range h.replicas {
		h.stopReplica(i, syscall.SIGTERM)
	}
	for i := range h.plugins {
		h.stopPlugin(i, syscall.SIGTERM)
	}
	if h.cp != nil {
		if err := h.cp.Stop(); err != nil {
			h.logf("stopping the control plane: %v", err)
		}
	}
	if h.second != nil && h.second.cp != nil {
		if err := h.second.cp.Stop(); err != nil {
			h.logf("stopping the second cluster's control plane: %v", err)
		}
	}
	for _, c := range h.closers {
		c()
	}
}

// serve serves handler on a loopback port until ctx ends or tearDown, and
// returns its URL.
func (h *harness) serve(ctx context.Context, handler http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	h.closers = append(h.closers, func() { stop(); _ = srv.Close() })
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

func (h *harness) run(ctx context.Context, sched Schedule) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := logr.NewContext(runCtx, logr.Discard())
	// Each cluster's kubelets are those of its own instances.
	sim := &kubeletsim.Simulator{Cloud: instancesNamed{h.cloud, nodePrefix}, Client: h.client, Period: 500 * time.Millisecond}
	var bg sync.WaitGroup
	bg.Go(func() { sim.Run(quiet) })
	if h.second != nil {
		sim2 := &kubeletsim.Simulator{Cloud: instancesNamed{h.cloud, secondNodePrefix}, Client: h.second.client, Period: 500 * time.Millisecond}
		bg.Go(func() { sim2.Run(quiet) })
	}
	watch, err := h.watch(runCtx)
	if err != nil {
		return err
	}
	bg.Go(func() { h.checkContinuously(runCtx) })

	h.start.Store(time.Now().UnixNano())
	var faultErr error
	var wg sync.WaitGroup
	if h.cfg.Failover > 0 {
		// The workload runs until the last kill is measured.
		workCtx, stopWork := context.WithCancel(runCtx)
		wg.Go(func() { h.runWorkload(workCtx, sched.Workload) })
		wg.Go(func() { defer stopWork(); faultErr = h.runFailover(runCtx) })
	} else {
		wg.Go(func() { h.runWorkload(runCtx, sched.Workload) })
		wg.Go(func() { faultErr = h.runFaults(runCtx, sched.Faults) })
		if h.second != nil {
			wg.Go(func() { h.runSecondWorkload(runCtx, sched.Second) })
		}
	}
	wg.Wait()
	if faultErr != nil {
		cancel()
		bg.Wait()
		watch.Wait()
		return faultErr
	}
	h.logf("schedule done: %d workload steps, %d faults; waiting for quiescence (at most %v)", h.report.Cycles, h.report.faultTotal(), h.cfg.Quiesce)
	h.quiesce(runCtx)
	cancel()
	bg.Wait()
	watch.Wait()
	h.report.finish(h.since())
	return ctx.Err()
}

func (h *harness) since() time.Duration { return time.Duration(time.Now().UnixNano() - h.start.Load()) }

// at waits until offset d of the run.
func (h *harness) at(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d - h.since())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// liveNodes are the first cluster's running instances, by name, for picks.
func (h *harness) liveNodes() []simcloud.Instance { return h.liveInstances(nodePrefix) }

// liveInstances are the running instances whose name starts with prefix,
// by name.
func (h *harness) liveInstances(prefix string) []simcloud.Instance {
	var out []simcloud.Instance
	for _, in := range h.cloud.List() {
		if in.State == simcloud.StateRunning && strings.HasPrefix(in.Name, prefix) {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *harness) pickService(pick uint32) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.services) == 0 {
		return "", false
	}
	return h.services[int(pick)%len(h.services)], true
}

func (h *harness) forgetService(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.services = slices.DeleteFunc(h.services, func(s string) bool { return s == name })
}
