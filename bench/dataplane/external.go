package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The maximum-throughput runs use wrk (HTTP/1.1, TLS and TCP rows) and
// h2load (HTTP/2 rows) when they are installed: C load generators cost
// less CPU per request than Go's client, so the proxy, not the generator,
// is what runs out. The fixed-rate runs are always the benchmark's own.
var (
	wrkTotal    = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(m?s)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	h2loadTotal = regexp.MustCompile(`finished in ([0-9.]+)(m?s),`)
	h2loadReqs  = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2loadCodes = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
)

// externalTool is the generator used for the row's maximum, "" for the
// benchmark's own.
func externalTool(p Protocol) string {
	tool := "wrk"
	if p.H2 {
		tool = "h2load"
	}
	if _, err := exec.LookPath(tool); err != nil {
		return ""
	}
	return tool
}

// externalMax runs wrk or h2load against t for d with conns requests in
// flight, on this process's CPU.
func externalMax(ctx context.Context, tool string, t target, conns int, d time.Duration) throughput {
	secs := strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1))
	var args []string
	switch tool {
	case "wrk":
		args = []string{"-t1", "-c" + strconv.Itoa(conns), "-d" + secs + "s", "--timeout", "10s", "-H", "Host: " + t.host}
		if !t.protocol.KeepAlive {
			args = append(args, "-H", "Connection: close")
		}
	case "h2load":
		args = []string{"-t1", "-c1", "-m" + strconv.Itoa(conns), "-D" + secs, "-H", ":authority: " + t.host}
	}
	url := t.url
	if t.protocol.GRPC {
		// h2load checks the HTTP status only; the fixed-rate runs check
		// grpc-status.
		args = append(args, "-d", t.grpcFile, "-H", "content-type: application/grpc", "-H", "te: trailers")
		url = strings.TrimSuffix(url, "/") + grpcPath
	}
	args = append(args, url)
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, args...).CombinedOutput()
	if err != nil {
		return throughput{failed: 1, firstErr: fmt.Errorf("%s: %w: %s", tool, err, out)}
	}
	r, err := parseExternal(tool, string(out))
	if err != nil {
		return throughput{failed: 1, firstErr: err}
	}
	return r
}

// parseExternal reads what wrk or h2load printed: answers counted as
// served are 2xx ones; errors and other statuses are failures.
func parseExternal(tool, out string) (throughput, error) {
	var r throughput
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	elapsed := func(v, unit string) time.Duration {
		f, _ := strconv.ParseFloat(v, 64)
		if unit == "ms" {
			return time.Duration(f * float64(time.Millisecond))
		}
		return time.Duration(f * float64(time.Second))
	}
	switch tool {
	case "wrk":
		m := wrkTotal.FindStringSubmatch(out)
		if m == nil {
			return r, fmt.Errorf("wrk printed no total: %s", out)
		}
		r.ok, r.elapsed = atoi(m[1]), elapsed(m[2], m[3])
		if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
			r.failed += atoi(m[1])
			r.ok -= atoi(m[1])
		}
		if m := wrkSocket.FindStringSubmatch(out); m != nil {
			// wrk counts reads cut at its end as errors; connects and
			// timeouts are the proxy's.
			r.failed += atoi(m[1]) + atoi(m[4])
		}
	case "h2load":
		m, reqs, codes := h2loadTotal.FindStringSubmatch(out), h2loadReqs.FindStringSubmatch(out), h2loadCodes.FindStringSubmatch(out)
		if m == nil || reqs == nil || codes == nil {
			return r, fmt.Errorf("h2load printed no totals: %s", out)
		}
		r.elapsed = elapsed(m[1], m[2])
		r.ok = atoi(codes[1])
		r.failed = atoi(reqs[2]) + atoi(codes[2]) + atoi(codes[3]) + atoi(codes[4])
	}
	if r.failed > 0 {
		r.firstErr = errors.New(tool + " counted failures: " + out)
	}
	return r, nil
}
