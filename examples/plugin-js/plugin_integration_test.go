//go:build integration

// Package pluginjs tests the JavaScript plugin: it must pass the
// conformance suite, and Outrigger must run a cluster through it.
package pluginjs

import (
	"bufio"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/npm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// startPlugin installs the plugin's dependencies (npm ci, once) and runs it on a
// fresh unix socket with the given instances until the test ends.
func startPlugin(t *testing.T, instances ...string) string {
	t.Helper()
	npm.Install(t, ".")
	dir, err := os.MkdirTemp("", "js")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "p.sock")
	cmd := exec.Command("node", "plugin.js", "--endpoint", endpoint, "--instances", strings.Join(instances, ","))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "serving") {
		t.Fatalf("the plugin did not start: %q %v", line, err)
	}
	return endpoint
}

func TestJavaScriptPluginPassesConformance(t *testing.T) {
	endpoint := startPlugin(t, "js-1", "js-2")
	bin := filepath.Join(t.TempDir(), "outrigger")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger").CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	junit := filepath.Join(t.TempDir(), "junit.xml")
	out, err := exec.Command(bin, "conformance", "--endpoint", endpoint, "--node", "js-1", "--junit", junit).CombinedOutput()
	if err != nil {
		t.Fatalf("outrigger conformance failed (%v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "0 failed") || strings.Contains(string(out), "SKIP") {
		t.Errorf("conformance report:\n%s", out)
	}
	var suites struct {
		Suites []struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
		} `xml:"testsuite"`
	}
	data, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		t.Fatalf("JUnit file does not parse: %v", err)
	}
	names := fmt.Sprint(suites.Suites)
	for _, want := range []string{"Instances", "LoadBalancer", "Routes"} {
		if !strings.Contains(names, want) {
			t.Errorf("JUnit suites %s lack %s", names, want)
		}
	}
}

// Outrigger runs a cluster through the JavaScript plugin.
func TestOutriggerWithTheJavaScriptPlugin(t *testing.T) {
	n1, n2 := testenv.Name("js"), testenv.Name("js")
	endpoint := startPlugin(t, n1, n2)
	cfg := filepath.Join(t.TempDir(), "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+endpoint+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := testenv.StartCloud(t) // unused by the plugin; StartOutrigger wants one
	testenv.StartOutrigger(t, c, "--cloud-provider=grpc", "--cloud-config="+cfg,
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller")
	for _, n := range []string{n1, n2} {
		testenv.CreateNode(t, n, nil)
	}
	for _, n := range []string{n1, n2} {
		testenv.Eventually(t, 30*time.Second, n+" initialized by the JavaScript plugin", func() (bool, error) {
			node := testenv.GetNode(t, n)
			return strings.HasPrefix(node.Spec.ProviderID, "memory://") && node.Labels[corev1.LabelTopologyZone] != "", nil
		})
	}
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("js-lb"), Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := testenv.Client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "load balancer from the JavaScript plugin", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1 && strings.HasPrefix(s.Status.LoadBalancer.Ingress[0].IP, "127.100."), err
	})
	if err := testenv.Client.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "service deleted", func() (bool, error) {
		_, err := testenv.Client.CoreV1().Services("default").Get(ctx, svc.Name, metav1.GetOptions{})
		return err != nil, nil
	})
}
