package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/pkg/dev/controlplane"
	"github.com/outrigger-ccm/outrigger/pkg/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
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
}

// namespace holds the run's Services.
const namespace = "chaos"

// foreignClass is a load balancer class Outrigger does not implement:
// Services with it must get no cloud load balancer from it.
const foreignClass = "example.com/not-outrigger"

type harness struct {
	cfg Config
	// start is when the schedule starts (until then, when setting up
	// began): offsets in the log and the report count from it.
	start   atomic.Int64
	cp      *controlplane.ControlPlane
	cloud   *simcloud.Cloud
	client  kubernetes.Interface
	dir     string
	simYAML string
	kubecfg string

	logMu    sync.Mutex
	mu       sync.Mutex
	report   *Report
	replicas []*replica
	services []string // created and not deleted, in creation order
	nextNode int
	nextSvc  int
	created  map[string]time.Time // Service name -> creation, until it gets an ingress
	lastLift time.Time
	closing  chan struct{} // closed by tearDown: replicas are not restarted any more
	starts   int           // replica processes started, for their caller names
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
	sched := NewSchedule(cfg.Seed, cfg.Duration)
	h := &harness{cfg: cfg, created: map[string]time.Time{}, report: newReport(cfg, sched), closing: make(chan struct{})}
	if cfg.Failover > 0 {
		h.report.Failover = newFailover(cfg)
		fmt.Fprintf(cfg.Log, "chaos: seed %d, failover: %d leader kills during a workload of at most %v (schedule %s: %d workload steps), lease %v, renew deadline %v, retry period %v\n",
			cfg.Seed, cfg.Failover, cfg.Duration, sched.Digest(), len(sched.Workload), cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod)
	} else {
		fmt.Fprintf(cfg.Log, "chaos: seed %d, %v, schedule %s: %d workload steps, %d faults\n",
			cfg.Seed, cfg.Duration, sched.Digest(), len(sched.Workload), len(sched.Faults))
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
	if err := h.startReplicas(); err != nil {
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
	cloudURL, err := h.cloud.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	h.simYAML = filepath.Join(h.dir, "sim.yaml")
	if err := os.WriteFile(h.simYAML, []byte("endpoint: "+cloudURL+"\n"), 0o600); err != nil {
		return err
	}
	if h.cp, err = controlplane.Start(ctx); err != nil {
		return err
	}
	h.kubecfg = filepath.Join(h.dir, "kubeconfig")
	if err := h.cp.WriteAdminKubeconfig(h.kubecfg); err != nil {
		return err
	}
	cfg := rest.CopyConfig(h.cp.Config)
	cfg.QPS, cfg.Burst, cfg.Timeout = 200, 400, 10*time.Second
	if h.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if _, err := h.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
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

func (h *harness) startReplicas() error {
	for i := range h.cfg.Replicas {
		h.replicas = append(h.replicas, nil)
		if err := h.startReplica(i); err != nil {
			return err
		}
	}
	h.logf("environment up: %d nodes, %d Services, %d Outrigger replicas (%s)", h.cfg.Nodes, h.cfg.Services, h.cfg.Replicas, h.dir)
	return nil
}

// replicaArgs run Outrigger with every controller, IPAM and routes on, and
// the configured leader election: outside failover runs, short enough that
// a killed leader is replaced within seconds.
func (h *harness) replicaArgs(cloudConfig string) []string {
	return []string{
		"--kubeconfig=" + h.kubecfg, "--cloud-provider=sim", "--cloud-config=" + cloudConfig,
		"--leader-elect=true", "--leader-elect-lease-duration=" + h.cfg.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + h.cfg.RenewDeadline.String(), "--leader-elect-retry-period=" + h.cfg.RetryPeriod.String(),
		"--secure-port=0", "--allocate-node-cidrs=true", "--cluster-cidr=198.18.0.0/16", "--configure-cloud-routes=true",
		"--route-reconciliation-period=2s", "--node-monitor-period=2s",
	}
}

// startReplica starts replica i. A replica that exits on its own (Outrigger
// exits when it loses its leader lease, as upstream's CCM does) is started
// again a second later, as the kubelet restarts a container.
func (h *harness) startReplica(i int) error {
	log, err := os.OpenFile(filepath.Join(h.dir, fmt.Sprintf("outrigger-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// Each process its own caller name, so the cloud's call log tells who
	// called: the failover run recognises the leader by it.
	h.mu.Lock()
	h.starts++
	caller := fmt.Sprintf("%s%d-%d", callerPrefix, i, h.starts)
	h.mu.Unlock()
	simYAML, err := os.ReadFile(h.simYAML)
	if err != nil {
		log.Close()
		return err
	}
	cloudConfig := filepath.Join(h.dir, caller+".yaml")
	if err := os.WriteFile(cloudConfig, append(simYAML, []byte("caller: "+caller+"\n")...), 0o600); err != nil {
		log.Close()
		return err
	}
	cmd := exec.Command(h.cfg.Outrigger, h.replicaArgs(cloudConfig)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting Outrigger replica %d: %w", i, err)
	}
	r := &replica{cmd: cmd, done: make(chan struct{}), caller: caller}
	h.mu.Lock()
	taken := h.replicas[i] != nil
	select {
	case <-h.closing:
		taken = true // tearing down: not this one
	default:
	}
	if !taken {
		h.replicas[i] = r
	}
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		close(r.done)
		if taken {
			return
		}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		// Only if nobody stopped it on purpose (the slot still holds it).
		h.mu.Lock()
		restart := h.replicas[i] == r
		if restart {
			h.replicas[i] = nil
		}
		h.mu.Unlock()
		if !restart {
			return
		}
		h.report.replicaExit()
		h.logf("Outrigger replica %d exited on its own (%v); restarted", i, err)
		if err := h.startReplica(i); err != nil {
			h.logf("%v", err)
		}
	}()
	if taken {
		// Another start won the slot (a restart racing a fault's lift).
		_ = cmd.Process.Kill()
	}
	return nil
}

// stopReplica signals replica i and waits for it to exit; it is not
// restarted.
func (h *harness) stopReplica(i int, sig syscall.Signal) {
	h.mu.Lock()
	r := h.replicas[i]
	h.replicas[i] = nil
	h.mu.Unlock()
	if r == nil {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

func (h *harness) tearDown() {
	close(h.closing)
	for i := range h.replicas {
		h.stopReplica(i, syscall.SIGTERM)
	}
	if h.cp != nil {
		if err := h.cp.Stop(); err != nil {
			h.logf("stopping the control plane: %v", err)
		}
	}
}

func (h *harness) run(ctx context.Context, sched Schedule) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := logr.NewContext(runCtx, logr.Discard())
	sim := &kubeletsim.Simulator{Cloud: h.cloud, Client: h.client, Period: 500 * time.Millisecond}
	var bg sync.WaitGroup
	bg.Go(func() { sim.Run(quiet) })
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

// liveNodes are the running instances, by name, for picks.
func (h *harness) liveNodes() []simcloud.Instance {
	var out []simcloud.Instance
	for _, in := range h.cloud.List() {
		if in.State == simcloud.StateRunning {
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
