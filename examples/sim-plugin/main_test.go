package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv/docblock"
	"github.com/outrigger-ccm/outrigger/pkg/conformance"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// TestPluginsDocExample checks that the main.go in docs/plugins.md is this
// example's, at most 20 lines, and that it builds into a plugin that passes
// the conformance suite.
func TestPluginsDocExample(t *testing.T) {
	docblock.Check(t, "../../docs/plugins.md", "plugin-main", "main.go", 20)

	dir := t.TempDir()
	bin := filepath.Join(dir, "sim-plugin")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := simcloud.New("")
	url, err := c.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Create(simcloud.CreateRequest{Name: "doc-1"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sim.yaml")
	if err := os.WriteFile(cfg, []byte("endpoint: "+url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "doc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	endpoint := "unix://" + filepath.Join(sockDir, "p.sock")
	cmd := exec.Command(bin, "--endpoint", endpoint, "--cloud-config", cfg)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	p, err := plugin.Dial(dctx, plugin.Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	results := conformance.Run(ctx, p, conformance.Options{Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: in.Name}}}, CallTimeout: 5 * time.Second})
	if conformance.Failed(results) > 0 {
		var report strings.Builder
		_ = conformance.WriteText(&report, results)
		t.Fatalf("the documented plugin fails conformance:\n%s", report.String())
	}
}
