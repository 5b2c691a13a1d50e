//go:build integration

package staticcloud_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/docblock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestProviderGuideExample checks that the main.go shown in
// docs/provider-guide.md is the example's, is at most 20 lines, builds, and
// initializes a node on a real API server.
func TestProviderGuideExample(t *testing.T) {
	docblock.Check(t, "../../docs/provider-guide.md", "provider-main", "cmd/staticcloud-ccm/main.go", 20)

	dir := t.TempDir()
	bin := filepath.Join(dir, "staticcloud-ccm")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/staticcloud-ccm").CombinedOutput(); err != nil {
		t.Fatalf("building the guide's main.go: %v\n%s", err, out)
	}
	name := testenv.Name("metal")
	cfg := filepath.Join(dir, "machines.yaml")
	machines := "machines:\n- name: " + name + "\n  instanceType: metal.large\n  zone: rack-a\n  region: dc-1\n  internalIPs: [198.18.0.1, fd00::1]\n"
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
