//go:build integration

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestShortChaosRun is the short, fixed-seed run of `make test`: 2 minutes
// of workload and every kind of fault on 20 nodes and 20 Services, on a
// cloud shared with a second CCM serving the foreign class (Config.Shared)
// and with a second cluster of the same name (Config.SecondCluster),
// Outrigger reaching the cloud through plugins restarted mid-call
// (Config.Plugin), then every invariant must hold.
func TestShortChaosRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outrigger")
	build := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	plugin := filepath.Join(t.TempDir(), "sim-plugin")
	build = exec.Command("go", "build", "-o", plugin, "github.com/outrigger-ccm/outrigger/examples/sim-plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/sim-plugin: %v\n%s", err, out)
	}
	var log bytes.Buffer
	cfg := Config{Seed: 1, Duration: 2 * time.Minute, Nodes: 20, Services: 20, Replicas: 2, Shared: true, SharedReplicas: 2,
		SecondCluster: true, SecondReplicas: 2, Plugin: plugin, Outrigger: bin, WorkDir: filepath.Join(t.TempDir(), "run"), Log: &log}
	report, err := Run(context.Background(), cfg)
	t.Logf("run log:\n%s", log.String())
	if report != nil {
		var table bytes.Buffer
		report.Table(&table)
		t.Logf("report:\n%s", table.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(slices.Clone(FaultKinds), cfg.extraFaults()...) {
		if report.Faults[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if report.Cycles == 0 {
		t.Error("no workload ran")
	}
	if report.Shared == nil || report.Shared.Ingress.Count == 0 {
		t.Error("the second CCM gave no Service of its class a load balancer")
	}
	if c := report.SecondCluster; c == nil || c.Cycles == 0 || c.Final.LoadBalancers == 0 || c.Final.Routes == 0 {
		t.Errorf("the second cluster ran no workload or ended with no load balancer or route: %+v", c)
	}
	if report.Plugin == nil || report.Plugin.MidCall == 0 {
		t.Error("no plugin was killed while a call was in flight")
	}
	if !report.Quiesced {
		t.Error("the system did not quiesce after the last fault")
	}
	for _, v := range report.Violations {
		t.Errorf("violation %s %s at %.1fs: %s", v.Invariant, v.Object, v.At, v.Detail)
	}
	if t.Failed() {
		var logs []string
		for i := range cfg.Replicas {
			logs = append(logs, fmt.Sprintf("outrigger-%d.log", i))
		}
		for i := range cfg.SharedReplicas {
			logs = append(logs, fmt.Sprintf("outrigger-shared-%d.log", i))
		}
		for i := range cfg.SecondReplicas {
			logs = append(logs, fmt.Sprintf("second-outrigger-%d.log", i))
		}
		for i := range cfg.Replicas {
			logs = append(logs, fmt.Sprintf("plugin-%d.log", i))
		}
		for _, name := range logs {
			if b, err := os.ReadFile(filepath.Join(cfg.WorkDir, name)); err == nil {
				t.Logf("%s (last 4000 bytes):\n%s", name, b[max(0, len(b)-4000):])
			}
		}
	}
}

// TestFailover SIGKILLs the leader of three replicas twice, with upstream's
// default leader election, during churn: each time another replica must
// take the Lease and call the cloud, no follower may call it, and the
// system must settle with every invariant holding. The times are measured
// (make chaos records them), not asserted.
func TestFailover(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outrigger")
	build := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	var log bytes.Buffer
	cfg := Config{Seed: 1, Failover: 2, Nodes: 5, Services: 5,
		Outrigger: bin, WorkDir: filepath.Join(t.TempDir(), "run"), Log: &log}
	report, err := Run(context.Background(), cfg)
	t.Logf("run log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	f := report.Failover
	if f == nil {
		t.Fatal("a failover run reported no failover")
	}
	for _, msg := range f.Failures {
		t.Errorf("failover failed: %s", msg)
	}
	if len(f.Samples) != cfg.Failover {
		t.Errorf("measured %d kills, want %d", len(f.Samples), cfg.Failover)
	}
	for _, s := range f.Samples {
		if s.NewLeader == "" || s.NewLeader == s.Killed {
			t.Errorf("kill at %.1fs of %s: new leader %q", s.At, s.Killed, s.NewLeader)
		}
	}
	if f.FollowerCalls != 0 {
		t.Errorf("%d cloud calls by replicas that were not the leader", f.FollowerCalls)
	}
	if report.Replicas != 3 {
		t.Errorf("ran %d replicas, want 3", report.Replicas)
	}
	if !report.Quiesced {
		t.Error("the system did not quiesce after the last kill")
	}
	for _, v := range report.Violations {
		t.Errorf("violation %s %s at %.1fs: %s", v.Invariant, v.Object, v.At, v.Detail)
	}
}
