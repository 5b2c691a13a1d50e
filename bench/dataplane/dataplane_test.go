package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the benchmark's child, as the command's
// main does: with OUTRIGGER_BENCH_DATAPLANE set it serves the data plane.
func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		if err := serveDataplane(path); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The smoke run answers every request through every peer installed (the
// data plane always is) and prints a table with a line per peer; it asserts
// nothing about speed.
func TestSmokeServesThroughEveryPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := smokeConfig()
	cfg.Workdir = t.TempDir()
	var log strings.Builder
	results, err := measure(ctx, cfg, &log)
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	measured := map[string]bool{}
	for _, r := range results {
		if r.Skipped != "" {
			t.Errorf("%s, %s: %s", r.Row, r.Peer, r.Skipped)
			continue
		}
		measured[r.Peer] = true
		if r.Max.ok == 0 || r.Max.failed > 0 {
			t.Errorf("%s, %s: %d answered, %d failed (first: %v)", r.Row, r.Peer, r.Max.ok, r.Max.failed, r.Max.firstErr)
		}
		if len(r.Latency) != len(cfg.Loads) || len(r.Latency[0].sorted) == 0 || r.Latency[0].failed > 0 {
			t.Errorf("%s, %s: the fixed-rate run answered nothing or failed", r.Row, r.Peer)
		}
		if r.Peer != direct && r.PeakRSS == 0 {
			t.Errorf("%s, %s: no peak RSS", r.Row, r.Peer)
		}
	}
	for _, p := range []string{direct, "outrigger"} {
		if !measured[p] {
			t.Errorf("%s not measured", p)
		}
	}
	for _, p := range cfg.Peers {
		if p.Binary != "" && !measured[p.Name] && !strings.Contains(log.String(), p.Name+": not installed") {
			t.Errorf("%s neither measured nor said to be missing", p.Name)
		}
	}
	tbl := table(cfg, results)
	if n := strings.Count(tbl, "\n| HTTP/1.1"); n != len(results) {
		t.Errorf("table has %d lines of results, want %d:\n%s", n, len(results), tbl)
	}
	t.Log("\n" + tbl)
}

func TestParseRowsAddsRouteCountsOverHTTP1(t *testing.T) {
	rows, err := parseRows("http1,tcp", "1,100")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.String())
	}
	want := "HTTP/1.1 keep-alive, 1 route|TCP|HTTP/1.1 keep-alive, 100 routes"
	if strings.Join(got, "|") != want {
		t.Errorf("rows %q, want %q", strings.Join(got, "|"), want)
	}
	if _, err := parseRows("http3", "1"); err == nil {
		t.Error("an unknown row accepted")
	}
}
