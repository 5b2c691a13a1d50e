// Package benchenv holds what the benchmarks share: running Outrigger or
// the upstream cloud-controller-manager against the same control plane and
// sim cloud, and reading the API server's request counters.
package benchenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// UpstreamName names the upstream CCM in reports.
const UpstreamName = "upstream cloud-controller-manager (k8s.io/cloud-provider v0.37.2)"

// UpstreamTuned are the flags that make the upstream CCM's node controllers
// as parallel as Outrigger's defaults: its own defaults (one worker, 20 API
// queries a second) are sized for small clusters.
var UpstreamTuned = []string{"--concurrent-node-syncs=256", "--kube-api-qps=500", "--kube-api-burst=1000"}

// Process is a CCM running as its own process.
type Process struct {
	cmd *exec.Cmd
	// Done receives the exit: nil when the context ended it.
	Done <-chan error
}

// Signal sends the process sig.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// StartProcess runs a CCM binary with args until ctx ends (then interrupts
// it); its output goes to a log file in the temp dir named logName.
func StartProcess(ctx context.Context, bin string, args []string, logName string) (*Process, error) {
	done := make(chan error, 1)
	cmd := exec.CommandContext(ctx, bin, args...)
	log, err := os.Create(filepath.Join(os.TempDir(), logName))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	// A CCM busy retrying throttled calls may not exit on the interrupt
	// (the upstream CCM was seen not to): it is killed after a while.
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		err := cmd.Wait()
		log.Close()
		if ctx.Err() != nil {
			err = nil
		}
		done <- err
	}()
	return &Process{cmd: cmd, Done: done}, nil
}

// PeakRSS is the process's peak resident set so far (VmHWM), in MiB.
func (p *Process) PeakRSS() (float64, error) { return p.memory("VmHWM") }

// RSS is the process's resident set now (VmRSS), in MiB.
func (p *Process) RSS() (float64, error) { return p.memory("VmRSS") }

// memory reads one of /proc/<pid>/status's memory fields, in MiB.
func (p *Process) memory(field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CCM's memory use: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%f kB", &kb); err != nil {
				return 0, fmt.Errorf("parsing %s %q: %w", field, v, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// CPUSeconds is the CPU time the process used so far, user and system.
func (p *Process) CPUSeconds() (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CCM's CPU time: %w", err)
	}
	return parseCPUSeconds(string(data))
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux architecture Go runs on.
const clockTicks = 100

// parseCPUSeconds reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name, field 2, is in parentheses and
// may hold spaces: the fields are counted after its closing one.
func parseCPUSeconds(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is f[11], stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat %q", stat)
	}
	var utime, stime float64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, fmt.Errorf("parsing utime %q: %w", f[11], err)
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, fmt.Errorf("parsing stime %q: %w", f[12], err)
	}
	return (utime + stime) / clockTicks, nil
}

// StartUpstream runs the upstream CCM binary; see StartProcess.
func StartUpstream(ctx context.Context, bin string, args []string, logName string) (<-chan error, error) {
	p, err := StartProcess(ctx, bin, args, logName)
	if err != nil {
		return nil, err
	}
	return p.Done, nil
}

// StartOutrigger runs Outrigger in-process with opts, after applying the
// command-line flags in extra, until ctx ends. done receives its exit.
func StartOutrigger(ctx context.Context, opts *manager.Options, extra []string, reg *provider.Registry) (<-chan error, error) {
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(extra); err != nil {
		return nil, err
	}
	mgr, err := manager.New(ctx, opts, reg)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return done, nil
}

// APICounts returns the API server's count of mutating requests and, of
// them, conflicts (409). The benchmarks make no writes while a CCM runs, so
// a difference is the CCM's.
func APICounts(ctx context.Context, client kubernetes.Interface) (writes, conflicts int64, err error) {
	return APICountsExcept(ctx, client)
}

// APICountsExcept is APICounts without the writes to the resources named
// (plural, as in the API's paths): the API server's own, such as the
// IPAddress it creates for every Service and its Lease, or a CCM's leader
// election.
func APICountsExcept(ctx context.Context, client kubernetes.Interface, resources ...string) (writes, conflicts int64, err error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading API server metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return 0, 0, fmt.Errorf("parsing API server metrics: %w", err)
	}
	var total, conflict float64
	if f, ok := families["apiserver_request_total"]; ok {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY"}, labels["verb"]) && !slices.Contains(resources, labels["resource"]) {
				total += m.GetCounter().GetValue()
				if labels["code"] == "409" {
					conflict += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(total), int64(conflict), nil
}

// Env is one benchmark run's world: a fresh control plane, an admin client
// allowed to go fast, and a fresh sim cloud on loopback.
type Env struct {
	Client      kubernetes.Interface
	Kubeconfig  string
	Dir         string
	Cloud       *simcloud.Cloud
	CloudConfig string
	stop        []func()
}

// Start starts the control plane, with options, and the sim cloud; Close
// stops them.
func Start(ctx context.Context, options ...apiserver.Option) (*Env, error) {
	e := &Env{}
	cp, err := apiserver.Start(ctx, options...)
	if err != nil {
		return nil, err
	}
	e.stop = append(e.stop, func() { _ = cp.Stop() })
	if e.Dir, err = os.MkdirTemp("", "outrigger-bench-"); err != nil {
		e.Close()
		return nil, err
	}
	e.stop = append(e.stop, func() { os.RemoveAll(e.Dir) })
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(e.Kubeconfig); err != nil {
		e.Close()
		return nil, err
	}
	admin := *cp.Config
	admin.QPS, admin.Burst = 5000, 5000
	e.Client = kubernetes.NewForConfigOrDie(&admin)
	e.Cloud = simcloud.New("")
	cloudCtx, stopCloud := context.WithCancel(ctx)
	e.stop = append(e.stop, stopCloud)
	url, err := e.Cloud.Serve(cloudCtx, "127.0.0.1:0")
	if err != nil {
		e.Close()
		return nil, err
	}
	e.CloudConfig = filepath.Join(e.Dir, "cloud.yaml")
	if err := os.WriteFile(e.CloudConfig, []byte("endpoint: "+url+"\n"), 0o600); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close stops everything Start started, last first.
func (e *Env) Close() {
	for i := len(e.stop) - 1; i >= 0; i-- {
		e.stop[i]()
	}
}
