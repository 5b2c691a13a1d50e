// Package testenv is the integration-test harness: one real control plane
// (etcd + kube-apiserver) per test package, an in-process sim cloud per
// test, and Outrigger started in-process through the same code path as the
// binary (flags, kubeconfig file, cloud-config file).
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/providers/local"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

var (
	// Config reaches the package's API server as cluster admin.
	Config *rest.Config
	// Kubeconfig is a file holding the same.
	Kubeconfig string
	// Client is a clientset from Config.
	Client kubernetes.Interface
	// AuditLog is the API server's audit log of writes (JSON lines).
	AuditLog string

	dir string
	seq atomic.Int64
)

// RunDir is a directory of the package's run, removed when Main returns:
// for what its tests share, such as a binary built once.
func RunDir() string { return dir }

// Main starts the control plane, runs the package's tests and stops it.
// Use it as the package's TestMain.
func Main(m *testing.M) {
	ctrl.SetLogger(klog.NewKlogr())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	cp, err := startControlPlane(ctx, apiserver.WithAudit())
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	if dir, err = os.MkdirTemp("", "outrigger-test-"); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(Kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	Config = rest.CopyConfig(cp.Config)
	Config.QPS, Config.Burst = 1000, 2000
	Client = kubernetes.NewForConfigOrDie(Config)
	AuditLog = cp.AuditLog
	return m.Run()
}

// Name returns a name unique in this package's cluster, so tests sharing the
// control plane never see each other's objects.
func Name(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, seq.Add(1))
}

// Cloud is a sim cloud served on loopback for one test.
type Cloud struct {
	*simcloud.Cloud
	URL string
	// ConfigFile is a cloud-config for the sim provider pointing at it.
	ConfigFile string
}

// StartCloud serves a fresh sim cloud until the test ends.
func StartCloud(t testing.TB) *Cloud {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := simcloud.New("")
	url, err := c.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+url+"\nrequestTimeout: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &Cloud{Cloud: c, URL: url, ConfigFile: cfg}
}

// Registry is the providers a test Outrigger has: the sim, and the plugin
// client.
func Registry() *provider.Registry {
	reg := provider.NewRegistry()
	reg.Register(sim.ProviderName, sim.New)
	reg.Register(local.ProviderName, local.New)
	reg.Register(plugin.ProviderName, plugin.NewProvider)
	return reg
}

// Outrigger is one Outrigger instance started by a test.
type Outrigger struct {
	// Caller is the name its sim provider gives in the cloud's call log.
	Caller string

	cancel context.CancelFunc
	done   chan error
	stop   sync.Once
}

// Stop stops the instance and waits for it to exit; later calls do nothing.
func (o *Outrigger) Stop() {
	o.stop.Do(func() {
		o.cancel()
		_ = <-o.done //nolint:staticcheck // a test that cares about the run's error calls Wait
	})
}

// StartOutrigger runs Outrigger in-process with the given flags until the
// test ends (or Stop). Defaults suited to tests are applied first, so flags
// may override them: the package's kubeconfig, the cloud's config, no
// serving, no leader election, fast periods.
func StartOutrigger(t testing.TB, cloud *Cloud, flags ...string) *Outrigger {
	t.Helper()
	// Each instance names itself in the cloud's call log, as replicas do.
	caller := Name("replica")
	cfg, err := os.ReadFile(cloud.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "cloud.yaml")
	if err := os.WriteFile(cfgFile, append(cfg, "caller: "+caller+"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--kubeconfig=" + Kubeconfig,
		"--cloud-provider=sim",
		"--cloud-config=" + cfgFile,
		"--secure-port=0",
		"--leader-elect=false",
		"--node-monitor-period=200ms",
		"--cloud-call-timeout=3s",
	}
	// Several providers come with their configs in one file, instead of
	// the sim's flags.
	if slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--cloud-providers-file") }) {
		args = slices.DeleteFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "--cloud-provider=") || strings.HasPrefix(a, "--cloud-config=")
		})
	}
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(append(args, flags...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, klog.NewKlogr().WithValues("test", t.Name()))
	mgr, err := manager.New(ctx, opts, Registry())
	if err != nil {
		cancel()
		t.Fatalf("starting outrigger %s: %v", strings.Join(flags, " "), err)
	}
	o := &Outrigger{Caller: caller, cancel: cancel, done: make(chan error, 1)}
	go func() { o.done <- mgr.Start(ctx) }()
	t.Cleanup(o.Stop)
	return o
}

// Eventually is poll.Eventually: it polls cond until it returns true or
// timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	poll.Eventually(t, timeout, what, cond)
}

// GetNode reads a node.
func GetNode(t testing.TB, name string) *corev1.Node {
	t.Helper()
	n, err := Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Events lists the Events recorded about an object, by reason.
func Events(t testing.TB, name string) map[string][]corev1.Event {
	t.Helper()
	list, err := Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]corev1.Event{}
	for _, e := range list.Items {
		out[e.Reason] = append(out[e.Reason], e)
	}
	return out
}

// CreateNode registers a node as kubelet --cloud-provider=external does,
// after mutate (if any) changed it, and deletes it when the test ends.
func CreateNode(t testing.TB, name string, mutate func(*corev1.Node)) *corev1.Node {
	t.Helper()
	n := kubeletsim.NewNode(name)
	if mutate != nil {
		mutate(n)
	}
	out, err := Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = Client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return out
}

// SetReady sets the node's Ready condition as kubelet (true) or the node
// lifecycle controller of kube-controller-manager (false) would.
func SetReady(t testing.TB, name string, ready bool) {
	t.Helper()
	if err := kubeletsim.SetReady(context.Background(), Client, name, ready); err != nil {
		t.Fatal(err)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago (see
// freeport.Get; freeport.Reserve is race-free for a child that binds with
// SO_REUSEPORT).
func FreePort(t testing.TB) int { return freeport.Get(t) }

// RunController runs, until the test ends, a manager on the package's API
// server holding what setup adds (one controller, wired to a provider double
// the sim cannot play), with serving off. modify may adjust the manager's
// options first (a cache restricted to the test's namespace, say).
func RunController(t testing.TB, setup func(crmanager.Manager) error, modify ...func(*crmanager.Options)) {
	t.Helper()
	opts := crmanager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, m := range modify {
		m(&opts)
	}
	mgr, err := ctrl.NewManager(Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	})
}

// startControlPlane starts etcd and kube-apiserver, again if one of them
// exits before it is ready. Their ports are envtest's choice, free a moment
// before they bind them: another process may take one meanwhile (test
// packages run in parallel), and envtest tells that only as an exit before
// readiness (it keeps their output). It stops what it started on failure.
func startControlPlane(ctx context.Context, options ...apiserver.Option) (*apiserver.ControlPlane, error) {
	var err error
	for range 3 {
		var cp *apiserver.ControlPlane
		if cp, err = apiserver.Start(ctx, options...); err == nil {
			return cp, nil
		}
		if !strings.Contains(err.Error(), "stopped unexpectedly before becoming ready") {
			return nil, err
		}
		fmt.Fprintln(os.Stderr, "testenv: starting the control plane again:", err)
	}
	return nil, err
}

// SecondControlPlane is another cluster's API server and etcd, for tests
// of two clusters sharing one cloud.
type SecondControlPlane struct {
	Client     kubernetes.Interface
	Kubeconfig string
	// Stop stops its etcd and API server before the test ends (a cluster
	// going down); later calls, and the test's end, do nothing more.
	Stop func()
}

// StartSecondControlPlane starts another control plane until the test ends.
func StartSecondControlPlane(t testing.TB) *SecondControlPlane {
	t.Helper()
	cp, err := startControlPlane(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { _ = cp.Stop() }) }
	t.Cleanup(stop)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	return &SecondControlPlane{Client: kubernetes.NewForConfigOrDie(cfg), Kubeconfig: kc, Stop: stop}
}
