package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The smoke run serves one tenant (and one joining) each way the benchmark
// measures, through every step: the tenants converge, the churn is served,
// the new tenant is served, a killed replica's tenant is served again, and
// the table has a line for each. It asserts nothing about speed.
func TestSmokeServesEveryStepEachWay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both CCMs and starts four control planes")
	}
	dir := t.TempDir()
	cfg := config{
		outriggerBin: filepath.Join(dir, "outrigger-ccm"), upstreamBin: filepath.Join(dir, "upstream-ccm"),
		nodes: 2, churnNodes: 2, churnServices: 2, qps: 100,
		latency: time.Millisecond, idle: 100 * time.Millisecond, bound: 2 * time.Minute,
	}
	build := func(module, out string) {
		cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, ".")
		cmd.Dir = module
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", module, err, b)
		}
	}
	build("../outrigger-ccm", cfg.outriggerBin)
	build("../upstream-ccm", cfg.upstreamBin)
	order := []ccm{ccms["outrigger"], ccms["outrigger-3"], ccms["upstream"]}
	rows, err := measure(t.Context(), cfg, []int{1}, order)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(order) {
		t.Fatalf("%d rows, want %d", len(rows), len(order))
	}
	for _, r := range rows {
		if r.processes == 0 || r.rssIdle <= 0 || r.rssPeak < r.rssIdle || r.callsChurn == 0 {
			t.Errorf("%s: processes %d, RSS %.0f (peak %.0f) MiB, %d churn calls", r.ccm.name, r.processes, r.rssIdle, r.rssPeak, r.callsChurn)
		}
		if (r.ccm.replicas > 1) != (r.failoverTenants > 0) {
			t.Errorf("%s: %d tenants of a killed replica served again", r.ccm.name, r.failoverTenants)
		}
	}
	table := render(cfg, rows)
	t.Log("\n" + table)
	for _, c := range order {
		if !strings.Contains(table, "| 1 | "+c.name+" |") {
			t.Errorf("no line for %s", c.name)
		}
	}
	if !strings.Contains(table, "- 1 tenants: one Outrigger's resident memory is") {
		t.Error("no comparison line")
	}
}
