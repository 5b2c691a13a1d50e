// Command dataplane measures Outrigger's Gateway data plane side by side
// with nginx, HAProxy and Caddy (their Debian packages) and with no proxy at
// all, the same backend behind each, in one run: requests per second, proxy
// CPU per request, latency at fixed rates and peak RSS, for HTTP/1.1 with and
// without keep-alive, HTTPS, HTTP/2 over TLS, h2c, gRPC and TCP, and for 1 to
// 10,000 routes on one Gateway.
//
//	go run ./bench/dataplane
//	go run ./bench/dataplane -smoke
//
// Each proxy runs pinned to CPU 1 (taskset); the benchmark itself, which is
// both the load generator and the backend, to CPU 0. Outrigger's data plane
// is this same binary run again as a child, programmed from a Config file
// (OUTRIGGER_BENCH_DATAPLANE names it): the proxy package the product's
// `outrigger gateway-dataplane` serves, without the API server it watches.
// The peers' configuration files are generated here for the same routes.
// Everything listens on 127.0.0.1.
//
// -smoke runs one row for a few seconds and says nothing about speed: it
// checks that every peer installed answers through its configuration; a peer
// not installed is skipped with a line saying so.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// childEnv names the Config file a child serves as Outrigger's data plane.
const childEnv = "OUTRIGGER_BENCH_DATAPLANE"

// profileEnv names a directory where each data plane child writes its CPU
// profile (outrigger-*.cpu.pprof), for finding where its time goes.
const profileEnv = "OUTRIGGER_BENCH_CPUPROFILE"

func main() {
	if path := os.Getenv(childEnv); path != "" {
		if err := serveDataplane(path); err != nil {
			fmt.Fprintln(os.Stderr, "bench/dataplane child:", err)
			os.Exit(1)
		}
		return
	}
	cfg := defaultConfig()
	var rows, routes, peers string
	smoke := flag.Bool("smoke", false, "one row for a few seconds, asserting nothing about speed")
	flag.StringVar(&rows, "rows", strings.Join(protocolNames(), ","), "protocols measured (rows with 1 route)")
	flag.StringVar(&routes, "routes", "1,100,1000,10000", "route counts measured over HTTP/1.1 keep-alive")
	flag.StringVar(&peers, "peers", strings.Join(peerNames(), ","), "peers measured")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "each maximum-throughput run")
	flag.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "maximum-throughput runs of each peer in a row, in turns (the median is reported)")
	flag.DurationVar(&cfg.LatencyDuration, "latency-duration", cfg.LatencyDuration, "each fixed-rate run")
	flag.IntVar(&cfg.Connections, "connections", cfg.Connections, "connections of the load generator")
	flag.BoolVar(&cfg.Pin, "pin", cfg.Pin, "pin proxies to CPU 1 and this process to CPU 0 (taskset)")
	flag.BoolVar(&cfg.External, "external", cfg.External, "measure the maximum with wrk and h2load where installed")
	out := flag.String("out", "", "markdown table to write besides printing it")
	flag.Parse()
	if *smoke {
		cfg = smokeConfig()
	} else {
		var err error
		if cfg.Rows, err = parseRows(rows, routes); err == nil {
			cfg.Peers, err = parsePeers(peers)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/dataplane:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	table, err := run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dataplane:", err)
		os.Exit(1)
	}
	fmt.Print(table)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(table), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench/dataplane:", err)
			os.Exit(1)
		}
	}
}

// Config is one run of the benchmark.
type Config struct {
	Rows  []Row
	Peers []*Peer
	// Duration bounds each maximum-throughput run, LatencyDuration each
	// fixed-rate run.
	Duration, LatencyDuration time.Duration
	// Repeat is how many maximum-throughput runs each peer of a row gets,
	// in turns; the median is reported.
	Repeat int
	// Connections is how many requests the load generator keeps in
	// flight: that many HTTP/1.1 connections, or streams over the HTTP/2
	// connections Go's transport opens (one, until the proxy's stream
	// limit).
	Connections int
	// Loads are the fixed rates, as fractions of the slowest peer's
	// maximum in the row.
	Loads []float64
	// Pin: proxies on CPU 1, the benchmark on CPU 0.
	Pin bool
	// External: the maximum-throughput runs use wrk and h2load where
	// installed (external.go); otherwise the benchmark's own client.
	External bool
	// Workdir holds the generated configurations; empty: a temporary
	// directory removed at the end.
	Workdir string
}

func defaultConfig() Config {
	rows, _ := parseRows(strings.Join(protocolNames(), ","), "1,100,1000,10000")
	return Config{
		Rows:            rows,
		Peers:           peers(),
		Duration:        5 * time.Second,
		Repeat:          3,
		LatencyDuration: 5 * time.Second,
		Connections:     64,
		Loads:           []float64{0.25, 0.5, 0.75},
		Pin:             true,
		External:        true,
	}
}

// smokeConfig is -smoke: one row, each run well under a second.
func smokeConfig() Config {
	return Config{
		Rows:            []Row{{Protocol: protocols[0], Routes: 1}},
		Peers:           peers(),
		Duration:        500 * time.Millisecond,
		Repeat:          1,
		LatencyDuration: 300 * time.Millisecond,
		Connections:     8,
		Loads:           []float64{0.5},
	}
}
