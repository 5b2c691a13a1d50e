package main

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/outrigger-ccm/outrigger/bench/internal/upstreamfake"
)

func TestLogSlope(t *testing.T) {
	xs := []float64{1000, 5000, 20000, 50000}
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = 3 * math.Pow(x, 1.5)
	}
	k, ok := logSlope(xs, ys)
	if !ok || math.Abs(k-1.5) > 1e-9 {
		t.Fatalf("slope %v (%v), want 1.5", k, ok)
	}
	if _, ok := logSlope([]float64{1000}, []float64{2}); ok {
		t.Fatal("one point fitted")
	}
	if _, ok := logSlope([]float64{1000, 1000}, []float64{2, 3}); ok {
		t.Fatal("one node count fitted")
	}
}

// rows are a small run: Outrigger finished at both sizes, upstream
// defaults stopped at the bound at the larger one.
func rows() []Row {
	done := func(s float64, n int) Phase {
		return Phase{Ran: true, Finished: true, Seconds: s, Done: n, Want: n, Calls: int64(n)}
	}
	return []Row{
		{CloudLimit: 0, Nodes: 1000, Services: 100, CCM: outrigger, NodeInit: done(2, 1000), Provision: done(1, 100),
			Idle: &Idle{CallsPerPeriod: 1000, CPUPerPeriod: 0.5}, Churn: done(3, 100), Restart: done(4, 100), RestartFirstCall: 2.5,
			PeakRSSMiB: 60, CPUSeconds: 4},
		{CloudLimit: 0, Nodes: 1000, Services: 100, CCM: upstreamDefaults, NodeInit: done(200, 1000), Provision: done(30, 100),
			Idle: &Idle{CallsPerPeriod: 300}, Churn: done(40, 100), PeakRSSMiB: 70, CPUSeconds: 9},
		{CloudLimit: 0, Nodes: 4000, Services: 100, CCM: outrigger, NodeInit: done(8, 4000), Provision: done(2, 100),
			Idle: &Idle{CallsPerPeriod: 4000, CPUPerPeriod: 2}, Churn: done(5, 100), PeakRSSMiB: 120, CPUSeconds: 12},
		{CloudLimit: 0, Nodes: 4000, Services: 100, CCM: upstreamDefaults,
			NodeInit: Phase{Ran: true, Seconds: 900, Done: 3412, Want: 4000, Calls: 7000}, PeakRSSMiB: 90, CPUSeconds: 50},
	}
}

func TestFits(t *testing.T) {
	f := fits(rows())
	if len(f) != 2 || f[0].CCM != outrigger || f[1].CCM != upstreamDefaults {
		t.Fatalf("fits %+v", f)
	}
	// Four times the nodes: four times the time, twice the memory.
	if math.Abs(f[0].TimeExponent-1) > 1e-9 || math.Abs(f[0].RSSExponent-0.5) > 1e-9 {
		t.Fatalf("Outrigger: time ~ n^%v, RSS ~ n^%v; want 1 and 0.5", f[0].TimeExponent, f[0].RSSExponent)
	}
	if math.Abs(f[0].IdleCPUExponent-1) > 1e-9 || len(f[1].IdleCPUNodes) != 0 {
		t.Fatalf("idle CPU: Outrigger ~ n^%v, want 1; upstream fitted over %v, want none (no CPU figure)", f[0].IdleCPUExponent, f[1].IdleCPUNodes)
	}
	if len(f[1].TimeNodes) != 1 || len(f[1].RSSNodes) != 1 {
		t.Fatalf("upstream's unfinished row was fitted: %+v", f[1])
	}
}

func TestMarkdown(t *testing.T) {
	res := &Results{References: []Reference{{Nodes: 1000, Seconds: 1, Writes: 2000}, {Nodes: 4000, Seconds: 4, Writes: 8000}},
		ServiceReferences: []ServiceReference{{Services: 100, Seconds: 0.5, WithWritesSeconds: 0.8}}, Rows: rows()}
	res.Fits = fits(res.Rows)
	md := res.Markdown()
	for _, want := range []string{
		"| 1,000 | 1.0 | 2,000 |",
		"| 100 | 0.5 | 200 | 0.8 |",
		"| none | 1,000 | 100 | **Outrigger, defaults** | 2.0 | 2.00 | 1.0 | 2.00 | 1,000 / 100 |",
		"| none | 4,000 | 100 | upstream, defaults | > 900 (3,412 of 4,000) | > 225.00 | not reached |  | 7,000 |",
		"| Outrigger, defaults | none | 100 | 1.00 | 1,000, 4,000 | 0.50 | 1,000, 4,000 | 1.00 | 1,000, 4,000 |",
		"| 1,000.0 | 0.0 | 0.50 | 3.0 |",
		"| 100 / 0 | 2.5 / 4.0 | 60 | 4.0 |",
		"| upstream, defaults | none | 100 | no fit | 1,000 | no fit | 1,000 | no fit |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the tables lack %q:\n%s", want, md)
		}
	}
	// Every row of a table has the same number of cells as its header.
	for _, table := range strings.Split(strings.TrimSpace(md), "\n\n") {
		lines := strings.Split(table, "\n")
		cells := strings.Count(lines[0], "|")
		for _, l := range lines[1:] {
			if strings.Count(l, "|") != cells {
				t.Errorf("%q has %d separators, its header %d", l, strings.Count(l, "|"), cells)
			}
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", 2.5: "2.5", -1000: "-1,000"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestSVG(t *testing.T) {
	res := &Results{References: []Reference{{Nodes: 1000, Seconds: 1}, {Nodes: 4000, Seconds: 4}}, Rows: rows()}
	for _, c := range charts {
		a, b := c.svg(res), c.svg(res)
		if a != b {
			t.Fatalf("%s: two renderings of the same results differ", c.file)
		}
		// Well-formed XML.
		d := xml.NewDecoder(strings.NewReader(a))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v\n%s", c.file, err, a)
			}
		}
		if !strings.Contains(a, "Outrigger, defaults, 100 Services") || !strings.Contains(a, "upstream, defaults, 100 Services") {
			t.Errorf("%s: a series is missing from the legend", c.file)
		}
	}
	time := charts[0].svg(res)
	// Outrigger's two points, upstream's finished one filled and its
	// unfinished one open; the reference's two.
	if got := strings.Count(time, `fill="#ffffff" stroke="`+ccmColors[upstreamDefaults]+`"`); got != 1 {
		t.Errorf("%d open markers for upstream, want 1", got)
	}
	if got := strings.Count(time, "<polyline"); got != 3 {
		t.Errorf("%d lines, want 3 (two CCMs and the write limit)", got)
	}
	if !strings.Contains(charts[0].svg(&Results{}), "no rows measured") {
		t.Error("an empty chart does not say so")
	}
}

func TestTicks(t *testing.T) {
	lo, hi := decades(60, 120)
	if lo != 10 || hi != 1000 {
		t.Fatalf("decades(60, 120) = %v, %v", lo, hi)
	}
	got := yTicks(lo, hi)
	want := []float64{10, 20, 50, 100, 200, 500, 1000}
	if len(got) != len(want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	}
	if got := yTicks(1, 1e5); len(got) != 6 {
		t.Fatalf("five decades: ticks %v, want the six powers of ten", got)
	}
}

func TestPhaseCount(t *testing.T) {
	before := upstreamfake.Calls{Total: 10, Throttled: 1, ByOp: map[string]int64{"InstanceMetadata": 10}, ThrottledByOp: map[string]int64{"InstanceMetadata": 1}}
	after := upstreamfake.Calls{Total: 25, Throttled: 4, BackendWrites: 3,
		ByOp:          map[string]int64{"InstanceMetadata": 15, "GetLoadBalancer": 4, "EnsureLoadBalancer": 6},
		ThrottledByOp: map[string]int64{"InstanceMetadata": 2, "EnsureLoadBalancer": 2}}
	var lb, all Phase
	lb.count(before, after, lbOps)
	all.count(before, after, nil)
	if lb.Calls != 10 || lb.Throttled != 2 || lb.BackendWrites != 3 {
		t.Errorf("load balancer calls %d, throttled %d, backend writes %d; want 10, 2, 3", lb.Calls, lb.Throttled, lb.BackendWrites)
	}
	if all.Calls != 15 || all.Throttled != 3 || all.ByOp["InstanceMetadata"] != 5 || all.ThrottledByOp["InstanceMetadata"] != 1 {
		t.Errorf("every call: %+v", all)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		runs []float64
		want float64
	}{
		{[]float64{4}, 4},
		{[]float64{9, 3, 5}, 5},
		{[]float64{3.8, 8.7, 5.3}, 5.3},
	} {
		i := 0
		got, err := median(len(tt.runs), func() (float64, error) { i++; return tt.runs[i-1], nil })
		if err != nil || got != tt.want || i != len(tt.runs) {
			t.Errorf("median of %v: %v (%v) after %d runs, want %v", tt.runs, got, err, i, tt.want)
		}
	}
}
