package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// chart is one picture: a metric against nodes on log-log axes, one panel
// per cloud limit, a line per CCM and Service count.
type chart struct {
	file, title, unit string
	// value is a row's figure; finished is false when the bound cut the
	// phase short (the figure is then what was reached); ok is false when
	// the row has none.
	value func(Row) (v float64, finished, ok bool)
	// reference, when set, draws the API server's write limit.
	reference func(Reference) float64
}

var charts = []chart{
	{
		file: "scale-time.svg", title: "Seconds to all nodes initialized", unit: "seconds",
		value: func(r Row) (float64, bool, bool) {
			return r.NodeInit.Seconds, r.NodeInit.Finished, r.NodeInit.Ran && r.Error == ""
		},
		reference: func(ref Reference) float64 { return ref.Seconds },
	},
	{
		file: "scale-rss.svg", title: "Peak RSS of the CCM (MiB)", unit: "MiB",
		value: func(r Row) (float64, bool, bool) { return r.PeakRSSMiB, r.finished(), r.PeakRSSMiB > 0 },
	},
	{
		file: "scale-calls.svg", title: "Cloud calls to initialize the nodes (429s included)", unit: "calls",
		value: func(r Row) (float64, bool, bool) {
			return float64(r.NodeInit.Calls), r.NodeInit.Finished, r.NodeInit.Ran && r.Error == ""
		},
	},
}

var ccmColors = map[string]string{outrigger: "#1f5fbf", outriggerPlugin: "#2e9e6a", upstreamTuned: "#c8322d", upstreamDefaults: "#e08a1e"}

// dashes tell Service counts apart, in increasing order.
var dashes = []string{"", "7 4", "2 3"}

const (
	panelW, panelH = 380.0, 260.0
	marginL        = 70.0
	marginR        = 20.0
	marginT        = 56.0
	axisGap        = 44.0 // below a panel: tick labels and the axis name
	panelGap       = 64.0
	legendLine     = 18.0
)

type point struct {
	x, y     float64
	finished bool
}

type series struct {
	ccm      string
	services int
	label    string
	points   []point
}

// svg draws the chart for the results. The same results give the same
// bytes.
func (c chart) svg(res *Results) string {
	var limits []float64
	var servicesSeen []int
	for _, r := range res.Rows {
		if !slices.Contains(limits, r.CloudLimit) {
			limits = append(limits, r.CloudLimit)
		}
		if !slices.Contains(servicesSeen, r.Services) {
			servicesSeen = append(servicesSeen, r.Services)
		}
	}
	slices.Sort(limits)
	slices.Sort(servicesSeen)

	// Series per panel, and the ranges every panel shares.
	panels := make([][]series, len(limits))
	var xs, ys []float64
	for i, l := range limits {
		for _, ccm := range ccmOrder {
			for _, m := range servicesSeen {
				s := series{ccm: ccm, services: m, label: fmt.Sprintf("%s, %s Services", ccmNames[ccm], count(int64(m)))}
				for _, r := range res.Rows {
					if r.CloudLimit != l || r.CCM != ccm || r.Services != m {
						continue
					}
					if v, fin, ok := c.value(r); ok && v > 0 {
						s.points = append(s.points, point{float64(r.Nodes), v, fin})
						xs, ys = append(xs, float64(r.Nodes)), append(ys, v)
					}
				}
				slices.SortFunc(s.points, func(a, b point) int { return cmpFloat(a.x, b.x) })
				if len(s.points) > 0 {
					panels[i] = append(panels[i], s)
				}
			}
		}
	}
	var refs []point
	if c.reference != nil {
		for _, ref := range res.References {
			if v := c.reference(ref); v > 0 {
				refs = append(refs, point{float64(ref.Nodes), v, true})
				xs, ys = append(xs, float64(ref.Nodes)), append(ys, v)
			}
		}
		slices.SortFunc(refs, func(a, b point) int { return cmpFloat(a.x, b.x) })
	}

	// The legend: every series drawn, in order, then the reference.
	var legend []series
	for _, p := range panels {
		for _, s := range p {
			if !slices.ContainsFunc(legend, func(l series) bool { return l.ccm == s.ccm && l.services == s.services }) {
				legend = append(legend, s)
			}
		}
	}
	slices.SortFunc(legend, func(a, b series) int {
		if d := slices.Index(ccmOrder, a.ccm) - slices.Index(ccmOrder, b.ccm); d != 0 {
			return d
		}
		return a.services - b.services
	})

	n := max(1, len(limits))
	width := marginL + float64(n)*panelW + float64(n-1)*panelGap + marginR
	legendRows := len(legend) + 1 // and the marker note
	if len(refs) > 0 {
		legendRows++
	}
	height := marginT + panelH + axisGap + 16 + float64(legendRows)*legendLine + 10

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.1f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, esc(c.title))
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">no rows measured</text>`+"\n", marginL, marginT+panelH/2)
		b.WriteString("</svg>\n")
		return b.String()
	}
	// Nodes: the sizes measured, with room either side.
	xlo, xhi := slices.Min(xs)/1.6, slices.Max(xs)*1.6
	ylo, yhi := decades(slices.Min(ys), slices.Max(ys))
	var nodeTicks []float64
	for _, x := range xs {
		if !slices.Contains(nodeTicks, x) {
			nodeTicks = append(nodeTicks, x)
		}
	}
	slices.Sort(nodeTicks)

	for i, l := range limits {
		left := marginL + float64(i)*(panelW+panelGap)
		px := func(x float64) float64 {
			return left + panelW*(math.Log10(x)-math.Log10(xlo))/(math.Log10(xhi)-math.Log10(xlo))
		}
		py := func(y float64) float64 {
			return marginT + panelH - panelH*(math.Log10(y)-math.Log10(ylo))/(math.Log10(yhi)-math.Log10(ylo))
		}
		name := "no cloud limit"
		if l > 0 {
			name = "cloud limit " + limitName(l)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", left, marginT-10, esc(name))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888888"/>`+"\n", left, marginT, panelW, panelH)
		for _, t := range yTicks(ylo, yhi) {
			y := py(t)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e2e2e2"/>`+"\n", left, y, left+panelW, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, tickLabel(t))
		}
		for _, t := range nodeTicks {
			x := px(t)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e2e2e2"/>`+"\n", x, marginT, x, marginT+panelH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, marginT+panelH+16, num(t))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">nodes (log scale)</text>`+"\n", left+panelW/2, marginT+panelH+34)
		if i == 0 {
			fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s (log scale)</text>`+"\n", marginT+panelH/2, esc(c.unit))
		}
		if len(refs) > 0 {
			line(&b, refs, px, py, "#777777", "1 3", 1.5)
		}
		for _, s := range panels[i] {
			dash := dashes[min(slices.Index(servicesSeen, s.services), len(dashes)-1)]
			line(&b, s.points, px, py, ccmColors[s.ccm], dash, 2)
		}
	}

	// Legend.
	y := marginT + panelH + axisGap + 16
	for _, s := range legend {
		dash := dashes[min(slices.Index(servicesSeen, s.services), len(dashes)-1)]
		legendEntry(&b, y, ccmColors[s.ccm], dash, s.label)
		y += legendLine
	}
	if len(refs) > 0 {
		legendEntry(&b, y, "#777777", "1 3", "no CCM: the API server's write limit")
		y += legendLine
	}
	fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#ffffff" stroke="#333333" stroke-width="1.5"/>`+"\n", marginL+14, y-4)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">open marker: not finished within the bound (the figure reached)</text>`+"\n", marginL+40, y)
	b.WriteString("</svg>\n")
	return b.String()
}

func line(b *strings.Builder, pts []point, px, py func(float64) float64, color, dash string, width float64) {
	if len(pts) > 1 {
		coords := make([]string, len(pts))
		for i, p := range pts {
			coords[i] = fmt.Sprintf("%.1f,%.1f", px(p.x), py(p.y))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f"%s/>`+"\n", strings.Join(coords, " "), color, width, dashAttr(dash))
	}
	for _, p := range pts {
		fill := color
		if !p.finished {
			fill = "#ffffff"
		}
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke="%s" stroke-width="1.5"/>`+"\n", px(p.x), py(p.y), fill, color)
	}
}

func legendEntry(b *strings.Builder, y float64, color, dash, label string) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", marginL, y-4, marginL+28, y-4, color, dashAttr(dash))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", marginL+40, y, esc(label))
}

func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return fmt.Sprintf(` stroke-dasharray="%s"`, dash)
}

// decades widens [lo, hi] to whole powers of ten, at least one apart.
func decades(lo, hi float64) (float64, float64) {
	l := math.Pow(10, math.Floor(math.Log10(lo)))
	h := math.Pow(10, math.Ceil(math.Log10(hi)))
	if h <= l {
		h = l * 10
	}
	return l, h
}

// yTicks are the powers of ten in [lo, hi], with 2 and 5 times them when
// the range spans two decades or fewer.
func yTicks(lo, hi float64) []float64 {
	steps := []float64{1}
	if math.Log10(hi/lo) <= 2.001 {
		steps = []float64{1, 2, 5}
	}
	var out []float64
	for d := lo; d <= hi*1.0001; d *= 10 {
		for _, s := range steps {
			if t := d * s; t <= hi*1.0001 {
				out = append(out, t)
			}
		}
	}
	return out
}

// tickLabel is a tick's value: grouped digits from 1 up, the shortest
// decimal below.
func tickLabel(t float64) string {
	if t >= 1 {
		return num(math.Round(t))
	}
	return strconv.FormatFloat(t, 'g', -1, 64)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return xmlEscaper.Replace(s) }
