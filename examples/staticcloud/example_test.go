package staticcloud_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestProviderGuideExample checks that the main.go shown in
// docs/provider-guide.md is the example's, is at most 20 lines, builds, and
// initializes a node on a real API server.
func TestProviderGuideExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/provider-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- provider-main:begin -->\n```go\n")
	block, _, ok2 := strings.Cut(block, "```\n<!-- provider-main:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/provider-guide.md has no provider-main block")
	}
	src, err := os.ReadFile("cmd/staticcloud-ccm/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(src) {
		t.Fatalf("the guide's main.go differs from examples/staticcloud/cmd/staticcloud-ccm/main.go:\n%s", block)
	}
	if n := strings.Count(block, "\n"); n > 20 {
		t.Errorf("main.go has %d lines, the guide promises at most 20", n)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "staticcloud-ccm")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/staticcloud-ccm").CombinedOutput(); err != nil {
		t.Fatalf("building the guide's main.go: %v\n%s", err, out)
	}
	name := testenv.Name("metal")
	cfg := filepath.Join(dir, "machines.yaml")
	machines := "machines:\n- name: " + name + "\n  instanceType: metal.large\n  zone: rack-a\n  region: dc-1\n  internalIPs: [10.0.0.1, fd00::1]\n"
	if err := os.WriteFile(cfg, []byte(machines), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, nil)
	cmd := exec.Command(bin, "--cloud-provider=staticcloud", "--cloud-config="+cfg, "--kubeconfig="+testenv.Kubeconfig,
		"--leader-elect=false", "--secure-port=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.Eventually(t, 30*time.Second, "node initialized by the example provider", func() (bool, error) {
		n := testenv.GetNode(t, name)
		return n.Spec.ProviderID == "staticcloud://"+name && n.Labels["topology.kubernetes.io/zone"] == "rack-a" && len(n.Status.Addresses) == 3, nil
	})
}
