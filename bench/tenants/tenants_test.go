package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The smoke run serves two tenants (and one joining) each way the benchmark
// measures, through every step: the tenants converge, the churn is served,
// the new tenant is served, a killed replica's tenants are served again,
// and the table has a line for each; then one tenant broken each way while
// the other is served. It asserts nothing about speed.
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
	cfg.isolation = 2
	rows, isolation, err := measure(t.Context(), cfg, []int{2}, order)
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
		if !strings.Contains(table, "| 2 | "+c.name+" |") {
			t.Errorf("no line for %s", c.name)
		}
	}
	if len(isolation) != len(brokenWays) {
		t.Errorf("%d isolation rows, want one per way (%d)", len(isolation), len(brokenWays))
	}
	t.Log("\n" + renderIsolation(cfg, isolation))
	if !strings.Contains(table, "- 2 tenants: one Outrigger's resident memory is") {
		t.Error("no comparison line")
	}
}
