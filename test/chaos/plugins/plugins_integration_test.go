//go:build integration

// Package plugins puts out-of-process providers under fire: the plugin
// crashes, hangs, answers garbage and is upgraded (stopped and started
// again) while nodes join and LoadBalancer Services are created. Outrigger
// must reconnect on its own, put an Event on every object held up, and lose
// nothing: every node initialized and every Service given its load balancer
// once the plugin is back, no node deleted meanwhile. It runs the Go SDK
// (examples/sim-plugin) and the Node.js plugin (examples/plugin-js) as real
// processes.
package plugins

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/npm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var ctx = context.Background()

// process is a plugin running as its own process on a unix socket.
type process struct {
	t    *testing.T
	argv []string
	dir  string
	path string // the socket
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

func newProcess(t *testing.T, dir string, argv ...string) *process {
	sock, err := os.MkdirTemp("", "plug")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	p := &process{t: t, dir: dir, path: filepath.Join(sock, "p.sock")}
	p.argv = append(argv, "--endpoint", p.endpoint())
	log, err := os.Create(filepath.Join(t.TempDir(), "plugin.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.log = log
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		p.stop(syscall.SIGKILL)
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("plugin log (last 3000 bytes):\n%s", b[max(0, len(b)-3000):])
		}
	})
	return p
}

func (p *process) endpoint() string { return "unix://" + p.path }

// start runs the plugin and waits until its socket accepts connections.
func (p *process) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Dir = p.dir
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	p.done = done
	testenv.Eventually(p.t, 60*time.Second, "the plugin's socket", func() (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("the plugin exited: %v", p.cmd.ProcessState)
		default:
		}
		c, err := net.Dial("unix", p.path)
		if err == nil {
			c.Close()
		}
		return err == nil, err
	})
}

func (p *process) signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop signals the plugin and waits for it to exit.
func (p *process) stop(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	p.signal(sig)
	<-p.done
	p.cmd = nil
}

// fault is one way the plugin fails, and how it comes back; the Events on
// the objects it holds up say what happened (one of want).
type fault struct {
	name        string
	inject, fix func()
	want        []string
}

func faults(t *testing.T, p *process) []fault {
	var stopGarbage func()
	unreachable := []string{"plugin at " + p.endpoint() + " unreachable"}
	return []fault{
		{"crash (SIGKILL)", func() { p.stop(syscall.SIGKILL) }, p.start, unreachable},
		// Connected but silent: calls run into their deadline; the gRPC
		// client's error or the call layer's, whichever returns first.
		{"hang (SIGSTOP)", func() { p.signal(syscall.SIGSTOP) }, func() { p.signal(syscall.SIGCONT) }, []string{"deadline exceeded", "cloud call timed out"}},
		{"garbage on its socket", func() { p.stop(syscall.SIGKILL); stopGarbage = providertest.GarbageSocket(t, p.path) }, func() { stopGarbage(); p.start() }, unreachable},
		{"upgrade (SIGTERM, start again)", func() { p.stop(syscall.SIGTERM) }, p.start, unreachable},
	}
}

// underFire runs the scenario against a started plugin: join(i) makes node
// i's instance exist in the plugin's cloud (it may already).
func underFire(t *testing.T, p *process, nodes []string, join func(name string)) (services []string) {
	cfg := filepath.Join(t.TempDir(), "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+p.endpoint()+"\nreconnectMaxDelay: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cloud := testenv.StartCloud(t) // StartOutrigger wants one; the plugin has its own
	testenv.StartOutrigger(t, cloud, "--cloud-provider=grpc", "--cloud-config="+cfg, "--cloud-call-timeout=2s",
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller")
	ns := testenv.Name("fire")
	if _, err := testenv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newNode := func(name string) {
		join(name)
		testenv.CreateNode(t, name, nil)
	}
	newService := func() string {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("fire"), Namespace: ns},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := testenv.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		services = append(services, svc.Name)
		return svc.Name
	}
	converged := func(node, svc string) {
		t.Helper()
		testenv.Eventually(t, 2*time.Minute, node+" initialized and "+svc+" given a load balancer", func() (bool, error) {
			n := testenv.GetNode(t, node)
			s, err := testenv.Client.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return n.Spec.ProviderID != "" && len(s.Status.LoadBalancer.Ingress) == 1, fmt.Errorf("providerID %q, ingress %v", n.Spec.ProviderID, s.Status.LoadBalancer.Ingress)
		})
	}
	warned := func(f fault, name string) func() (bool, error) {
		return func() (bool, error) {
			var seen []string
			for _, evs := range testenv.Events(t, name) {
				for _, e := range evs {
					if e.Type == corev1.EventTypeWarning && slices.ContainsFunc(f.want, func(w string) bool { return strings.Contains(e.Message, w) }) {
						t.Logf("%s: %s %s: %s", f.name, name, e.Reason, e.Message)
						return true, nil
					}
					seen = append(seen, e.Reason+": "+e.Message)
				}
			}
			return false, fmt.Errorf("events: %q", seen)
		}
	}

	// Before any fault: a node whose kubelet has gone quiet (NotReady),
	// which the lifecycle controller checks with the plugin every period:
	// no failure of the plugin may get it deleted.
	newNode(nodes[0])
	converged(nodes[0], newService())
	testenv.SetReady(t, nodes[0], false)

	for i, f := range faults(t, p) {
		f.inject()
		node := nodes[i+1]
		newNode(node)
		svc := newService()
		testenv.Eventually(t, time.Minute, f.name+": an Event on node "+node, warned(f, node))
		testenv.Eventually(t, time.Minute, f.name+": an Event on Service "+svc, warned(f, svc))
		if n := testenv.GetNode(t, node); n.Spec.ProviderID != "" {
			t.Fatalf("%s: node %s initialized while the plugin was out", f.name, node)
		}
		f.fix()
		converged(node, svc)
	}

	// Nothing lost: every node is still there and initialized, every
	// Service has its ingress, and deleting the Services completes.
	for _, name := range nodes {
		if n := testenv.GetNode(t, name); n.Spec.ProviderID == "" {
			t.Errorf("node %s not initialized", name)
		}
	}
	for _, name := range services {
		s, err := testenv.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 {
			t.Errorf("Service %s: %v, ingress %v", name, err, s.Status.LoadBalancer.Ingress)
		}
		if err := testenv.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 2*time.Minute, "every Service deleted (finalizers released)", func() (bool, error) {
		l, err := testenv.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, err
	})
	return services
}

func nodeNames(prefix string) []string {
	var out []string
	for range 5 {
		out = append(out, testenv.Name(prefix))
	}
	return out
}

// The Go SDK: the sim provider served by examples/sim-plugin, its cloud
// here, so what the plugin did can be checked on the cloud itself.
func TestGoPluginUnderFire(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "sim-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/examples/sim-plugin").CombinedOutput(); err != nil {
		t.Fatalf("building examples/sim-plugin: %v\n%s", err, out)
	}
	cloud := testenv.StartCloud(t)
	p := newProcess(t, "", bin, "--cloud-config", cloud.ConfigFile)
	p.start()
	services := underFire(t, p, nodeNames("go-fire"), func(name string) {
		if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	})
	// Every load balancer the plugin made was deleted with its Service:
	// none leaked, none left over from a call retried across a restart.
	if lbs := cloud.LoadBalancers(); len(lbs) != 0 {
		t.Errorf("%d load balancers left in the cloud after deleting all %d Services: %+v", len(lbs), len(services), lbs)
	}
}

// The Node.js plugin (examples/plugin-js): an in-memory cloud, its
// instances named on its command line.
func TestJavaScriptPluginUnderFire(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "examples", "plugin-js")
	npm.Install(t, dir)
	nodes := nodeNames("js-fire")
	p := newProcess(t, dir, "node", "plugin.js", "--instances", strings.Join(nodes, ","))
	p.start()
	underFire(t, p, nodes, func(string) {})
}
