package main

import (
	"context"
	"fmt"
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
			fmt.Fprintln(os.Stderr, err)
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

// wrk's and h2load's summaries are read as answers and failures: a status
// other than 2xx, a connect error or a timeout fails; reads cut at wrk's
// end do not.
func TestParseExternalCountsFailures(t *testing.T) {
	wrk := `Running 1s test @ http://127.0.0.1:8080/
  1 threads and 64 connections
  10000 requests in 1.00s, 1.2MB read
  Socket errors: connect 1, read 5, write 0, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec:  10000.00
`
	h2 := `finished in 2.00s, 5000.00 req/s, 67.45KB/s
requests: 10010 total, 10010 started, 10010 done, 10000 succeeded, 10 failed, 10 errored, 0 timeout
status codes: 9996 2xx, 0 3xx, 4 4xx, 0 5xx
`
	for _, tc := range []struct {
		tool, out  string
		ok, failed int64
		elapsed    time.Duration
	}{
		{"wrk", wrk, 9997, 6, time.Second},
		{"h2load", h2, 9996, 14, 2 * time.Second},
	} {
		r, err := parseExternal(tc.tool, tc.out)
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		if r.ok != tc.ok || r.failed != tc.failed || r.elapsed != tc.elapsed {
			t.Errorf("%s: %d ok, %d failed in %s; want %d, %d in %s", tc.tool, r.ok, r.failed, r.elapsed, tc.ok, tc.failed, tc.elapsed)
		}
	}
	if _, err := parseExternal("wrk", "unable to connect"); err == nil {
		t.Error("wrk's output without a total accepted")
	}
}

// A row's maximum is the median of its runs, requests/s and CPU per
// request each on their own; a failure in any run is reported.
func TestMedianOfRuns(t *testing.T) {
	run := func(ok, failed int64, cpu float64) maxSample {
		return maxSample{max: throughput{ok: ok, failed: failed, elapsed: time.Second}, cpu: cpu}
	}
	got, cpu := medianOf([]maxSample{run(100, 0, 30e-6), run(300, 2, 10e-6), run(200, 0, 50e-6)})
	if got.perSecond() != 200 || cpu != 30e-6 || got.failed != 2 {
		t.Errorf("median %v requests/s, %v s CPU a request, %d failed; want 200, 30e-6, 2", got.perSecond(), cpu, got.failed)
	}
	if got, cpu := medianOf(nil); got.ok != 0 || cpu != 0 {
		t.Errorf("median of no runs %+v, %v", got, cpu)
	}
}
