package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux ABI).
const clockTicks = 100

// Result is one peer in one row.
type Result struct {
	Row  Row
	Peer string
	// Skipped says why the peer has no figures in the row.
	Skipped string
	Max     throughput
	// CPUPerRequest is the proxy's CPU seconds over the maximum-throughput
	// run divided by its requests; 0 for the no-proxy peer.
	CPUPerRequest float64
	// Latency is one fixed-rate run per Config.Loads, at Rates.
	Latency []latencies
	Rates   []float64
	// PeakRSS is the proxy's VmHWM in bytes at the end of the row.
	PeakRSS int64
}

// proc is one proxy process.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

func startProc(ctx context.Context, argv []string, pin bool) (*proc, error) {
	if pin {
		argv = append([]string{"taskset", "-c", "1"}, argv...)
	}
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = &limitedWriter{w: &p.stderr, n: 8 << 10}
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpu is the process's user and system CPU so far.
func (p *proc) cpu() (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which may hold spaces.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// peakRSS is VmHWM in bytes.
func (p *proc) peakRSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM")
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		_, _ = l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}

// freePort is a loopback port free a moment ago; a peer that fails to bind
// it fails its row.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pinSelf pins this process, every thread it has and will have, to CPU 0.
func pinSelf() error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset: %w: %s", err, out)
	}
	return nil
}

// running is a peer serving one row.
type running struct {
	peer   *Peer
	proc   *proc
	target target
	result *Result
}

// run measures every row and returns the markdown table; progress and
// skipped peers go to log.
func run(ctx context.Context, cfg Config, log io.Writer) (string, error) {
	results, err := measure(ctx, cfg, log)
	if err != nil {
		return "", err
	}
	return table(cfg, results), nil
}

func measure(ctx context.Context, cfg Config, log io.Writer) ([]*Result, error) {
	if cfg.Pin {
		if err := pinSelf(); err != nil {
			return nil, err
		}
	}
	dir := cfg.Workdir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "bench-dataplane-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	cert, err := newCertificate()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := setup{dir: dir, cert: cert, self: self}
	s.certFile, _ = write(dir, "cert.pem", string(cert.certPEM))
	s.keyFile, _ = write(dir, "key.pem", string(cert.keyPEM))
	if s.pemFile, err = write(dir, "haproxy.pem", string(cert.certPEM)+string(cert.keyPEM)); err != nil {
		return nil, err
	}
	if s.grpcFile, err = write(dir, "grpc-message", string(grpcMessage)); err != nil {
		return nil, err
	}
	if s.backend, err = startBackend(cert.tls); err != nil {
		return nil, err
	}
	defer s.backend.close()

	var installed []*Peer
	for _, p := range cfg.Peers {
		if p.Binary != "" {
			if _, err := exec.LookPath(p.Binary); err != nil {
				fmt.Fprintf(log, "%s: not installed (apt-get install -y %s), skipped\n", p.Name, p.Package)
				continue
			}
		}
		installed = append(installed, p)
	}
	var results []*Result
	for _, row := range cfg.Rows {
		rs, err := measureRow(ctx, cfg, s, row, installed, log)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// measureRow starts every peer for the row, measures each one's maximum,
// then each at fixed fractions of the slowest proxy's maximum.
func measureRow(ctx context.Context, cfg Config, s setup, row Row, peers []*Peer, log io.Writer) ([]*Result, error) {
	var (
		results []*Result
		live    []*running
	)
	defer func() {
		for _, r := range live {
			if r.proc != nil {
				r.proc.stop()
			}
		}
	}()
	for _, p := range peers {
		res := &Result{Row: row, Peer: p.Name}
		results = append(results, res)
		if !p.Supports(row.Protocol) {
			res.Skipped = "not supported"
			continue
		}
		r, err := startPeer(ctx, cfg, s, row, p, res)
		if err != nil {
			res.Skipped = "failed to start"
			fmt.Fprintf(log, "%s, %s: %v\n", row, p.Name, err)
			continue
		}
		live = append(live, r)
	}
	// Each peer's maximum is measured Repeat times, the peers taking turns,
	// and the median kept: the machine's speed drifts over minutes, and
	// turns spread the drift over every peer of the row alike.
	samples := make([][]maxSample, len(live))
	for i := range max(cfg.Repeat, 1) {
		for j, r := range live {
			fmt.Fprintf(log, "%s, %s: maximum for %s (%d of %d)\n", row, r.peer.Name, cfg.Duration, i+1, max(cfg.Repeat, 1))
			if i == 0 {
				// Unmeasured first: connections, TLS sessions, the Go
				// peers' heaps grown to their working size.
				_ = maxRate(ctx, r.target, cfg.Connections, min(time.Second, cfg.Duration/5))
			}
			samples[j] = append(samples[j], measureMax(ctx, cfg, row, r))
			if err := ctx.Err(); err != nil {
				return results, err
			}
		}
	}
	slowest := 0.0
	for j, r := range live {
		r.result.Max, r.result.CPUPerRequest = medianOf(samples[j])
		if r.result.Max.failed > 0 {
			fmt.Fprintf(log, "%s, %s: %d failed requests, the first: %v\n", row, r.peer.Name, r.result.Max.failed, r.result.Max.firstErr)
		}
		if rate := r.result.Max.perSecond(); r.proc != nil && rate > 0 && (slowest == 0 || rate < slowest) {
			slowest = rate
		}
	}
	if slowest == 0 {
		for _, r := range live {
			slowest = max(slowest, r.result.Max.perSecond())
		}
	}
	for _, load := range cfg.Loads {
		rate := load * slowest
		for _, r := range live {
			fmt.Fprintf(log, "%s, %s: %.0f requests/s for %s\n", row, r.peer.Name, rate, cfg.LatencyDuration)
			r.result.Rates = append(r.result.Rates, rate)
			r.result.Latency = append(r.result.Latency, fixedRate(ctx, r.target, cfg.Connections, rate, cfg.LatencyDuration))
			if err := ctx.Err(); err != nil {
				return results, err
			}
		}
	}
	for _, r := range live {
		if r.proc != nil {
			r.result.PeakRSS, _ = r.proc.peakRSS()
		}
	}
	return results, nil
}

// maxSample is one maximum-throughput run: what was answered, and the
// proxy's CPU seconds per request over it (0 without a proxy).
type maxSample struct {
	max throughput
	cpu float64
}

func measureMax(ctx context.Context, cfg Config, row Row, r *running) maxSample {
	var out maxSample
	before, _ := cpuOf(r)
	if tool := externalTool(row.Protocol); cfg.External && tool != "" {
		out.max = externalMax(ctx, tool, r.target, cfg.Connections, cfg.Duration)
	} else {
		out.max = maxRate(ctx, r.target, cfg.Connections, cfg.Duration)
	}
	after, _ := cpuOf(r)
	if n := out.max.ok; n > 0 && r.proc != nil {
		out.cpu = (after - before).Seconds() / float64(n)
	}
	return out
}

// medianOf is the run of median requests/s and, apart, the median CPU per
// request; failures are those of every run, so none is hidden by the
// median.
func medianOf(samples []maxSample) (throughput, float64) {
	if len(samples) == 0 {
		return throughput{}, 0
	}
	byRate := slices.Clone(samples)
	slices.SortStableFunc(byRate, func(a, b maxSample) int { return cmp.Compare(a.max.perSecond(), b.max.perSecond()) })
	byCPU := slices.Clone(samples)
	slices.SortStableFunc(byCPU, func(a, b maxSample) int { return cmp.Compare(a.cpu, b.cpu) })
	mid := byRate[len(byRate)/2].max
	mid.failed = 0
	for _, s := range samples {
		mid.failed += s.max.failed
		if mid.firstErr == nil {
			mid.firstErr = s.max.firstErr
		}
	}
	return mid, byCPU[len(byCPU)/2].cpu
}

func cpuOf(r *running) (time.Duration, error) {
	if r.proc == nil {
		return 0, nil
	}
	return r.proc.cpu()
}

// startPeer starts p for row and waits until a request through it is
// answered 200 (at most 30 s: nginx with 10,000 server blocks takes a
// while).
func startPeer(ctx context.Context, cfg Config, s setup, row Row, p *Peer, res *Result) (*running, error) {
	r := &running{peer: p, result: res}
	scheme := map[bool]string{false: "http", true: "https"}[row.Protocol.TLS]
	if p.Command == nil {
		addr := s.backend.plain
		if row.Protocol.TLS {
			addr = s.backend.tls
		}
		r.target = target{protocol: row.Protocol, grpcFile: s.grpcFile, url: scheme + "://" + addr + "/", host: row.host()}
		return r, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv, err := p.Command(s, row, port)
	if err != nil {
		return nil, fmt.Errorf("writing its configuration: %w", err)
	}
	if r.proc, err = startProc(ctx, argv, cfg.Pin); err != nil {
		return nil, err
	}
	r.target = target{protocol: row.Protocol, grpcFile: s.grpcFile, url: fmt.Sprintf("%s://127.0.0.1:%d/", scheme, port), host: row.host()}
	c := r.target.client(1)
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = r.target.once(ctx, c)
		if err == nil {
			return r, nil
		}
		select {
		case <-r.proc.done:
			return nil, fmt.Errorf("exited: %s", filepath.Base(argv[0])+": "+r.proc.stderr.String())
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			r.proc.stop()
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			r.proc.stop()
			return nil, fmt.Errorf("not answering after 30 s: %w; stderr: %s", err, r.proc.stderr.String())
		}
	}
}
