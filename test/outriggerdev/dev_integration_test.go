//go:build integration

// Package outriggerdev runs the outrigger binary the way a user does:
// `outrigger dev`, then the load balancers and nodes it serves. (Upstream's
// own end-to-end suite, run on a real cluster, is cluster/e2e.)
package outriggerdev

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// syncBuffer collects a child's output safely.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDev runs `outrigger dev` as `make dev` does, checks the nodes get
// initialized, terminates an instance with `outrigger sim` and sees its node
// deleted, then stops it with SIGTERM and checks the control plane went too.
func TestDev(t *testing.T) {
	if _, err := apiserver.EnsureAssets(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "outrigger")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger").CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state")
	// Node addresses, VIPs and ports of their own, so that a developer's
	// running `outrigger dev` does not collide with the test's. The cloud
	// and the console bind a port of the kernel's choosing (the cloud's is
	// in the state dir's sim.yaml); the secure port cannot be chosen so.
	dev := exec.Command(bin, "dev", "--nodes=2", "--state-dir="+state, "--cloud-address=127.0.0.1:0", "--console-address=127.0.0.1:0",
		"--secure-port="+strconv.Itoa(testenv.FreePort(t)),
		"--node-ip-range=127.3.0.0/16", "--lb-pool=127.0.203.0/24", "--log-file=-")
	var out syncBuffer
	dev.Stdout, dev.Stderr = &out, &out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	t.Cleanup(func() {
		_ = dev.Process.Kill()
		if t.Failed() {
			t.Logf("outrigger dev output:\n%s", out.String())
		}
	})

	kubeconfig := filepath.Join(state, "kubeconfig")
	poll.Until(t, 2*time.Minute, "the kubeconfig", func() bool { _, err := os.Stat(kubeconfig); return err == nil })
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	initialized := func(name string) bool {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.Spec.ProviderID != "" && n.Labels["topology.kubernetes.io/zone"] != ""
	}
	poll.Until(t, time.Minute, "node-1 and node-2 initialized", func() bool { return initialized("node-1") && initialized("node-2") })

	testLoadBalancers(t, client, kubeconfig, func(args ...string) {
		cmd := exec.Command(bin, append(append([]string{"sim"}, args...), "--cloud-config="+filepath.Join(state, "sim.yaml"))...)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("outrigger sim %v: %v\n%s", args, err, o)
		}
	})

	testGateway(t, kubeconfig)

	sim := exec.Command(bin, "sim", "terminate", "node-2", "--cloud-config="+filepath.Join(state, "sim.yaml"))
	if o, err := sim.CombinedOutput(); err != nil {
		t.Fatalf("outrigger sim terminate: %v\n%s", err, o)
	}
	poll.Until(t, time.Minute, "node-2 deleted", func() bool {
		_, err := client.CoreV1().Nodes().Get(ctx, "node-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})

	if err := dev.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("outrigger dev exited after SIGTERM: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("outrigger dev did not exit after SIGTERM")
	}
	host := cfg.Host
	hc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Discovery().ServerVersion(); err == nil {
		t.Errorf("the API server at %s still answers after outrigger dev exited", host)
	}
}

// testGateway applies examples/gateway/dev.yaml with kubectl, as
// getting-started does: the Gateway gets a VIP of the dev provider, and
// its two routes reach their Services on the simulated nodes.
func testGateway(t *testing.T, kubeconfig string) {
	t.Helper()
	kubectl := filepath.Join(apiserver.AssetsDir(), "kubectl")
	if o, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "../../examples/gateway/dev.yaml").CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, o)
	}
	var vip string
	poll.Until(t, time.Minute, "the Gateway programmed with an address", func() bool {
		o, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "gateway", "web",
			"-o", `jsonpath={.status.conditions[?(@.type=="Programmed")].status} {.status.addresses[0].value}`).Output()
		status, addr, _ := strings.Cut(string(o), " ")
		vip = addr
		return err == nil && status == "True" && addr != ""
	})
	for path, svc := range map[string]string{"/shop/cart": "default/shop port 80", "/blog": "default/blog port 80"} {
		var body string
		poll.Until(t, time.Minute, "GET "+path+" answered by "+svc, func() bool {
			resp, err := http.Get("http://" + vip + path)
			if err != nil {
				return false
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			return resp.StatusCode == 200 && strings.Contains(body, svc)
		})
		t.Logf("GET %s: %s", path, strings.TrimSpace(body))
	}
	resp, err := http.Get("http://" + vip + "/nowhere")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d, want 404", resp.StatusCode)
	}
	if o, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "delete", "-f", "../../examples/gateway/dev.yaml", "--wait").CombinedOutput(); err != nil {
		t.Fatalf("kubectl delete: %v\n%s", err, o)
	}
}
