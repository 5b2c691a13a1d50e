package main

import (
	"math"
	"slices"
)

// Fit is how time, memory and the idle CPU grow with nodes for one CCM, cloud limit and
// Service count: the exponent k of y ~ nodes^k, the least-squares slope on
// a log-log scale (1 is linear growth, 2 quadratic).
type Fit struct {
	CCM          string  `json:"ccm"`
	CloudLimit   float64 `json:"cloudLimit"`
	Services     int     `json:"services"`
	TimeNodes    []int   `json:"timeNodes"`
	TimeExponent float64 `json:"timeExponent"`
	RSSNodes     []int   `json:"rssNodes"`
	RSSExponent  float64 `json:"rssExponent"`
	// IdleCPU is the CCM's CPU seconds per refresh period of a quiet
	// cluster, over the rows that reached it.
	IdleCPUNodes    []int   `json:"idleCPUNodes,omitempty"`
	IdleCPUExponent float64 `json:"idleCPUExponent,omitempty"`
}

// logSlope is the least-squares slope of ln y against ln x; false without
// two distinct positive x.
func logSlope(xs, ys []float64) (float64, bool) {
	var lx, ly []float64
	for i := range xs {
		if xs[i] > 0 && ys[i] > 0 {
			lx, ly = append(lx, math.Log(xs[i])), append(ly, math.Log(ys[i]))
		}
	}
	if len(lx) < 2 {
		return 0, false
	}
	var mx, my float64
	for i := range lx {
		mx += lx[i]
		my += ly[i]
	}
	mx /= float64(len(lx))
	my /= float64(len(ly))
	var sxy, sxx float64
	for i := range lx {
		sxy += (lx[i] - mx) * (ly[i] - my)
		sxx += (lx[i] - mx) * (lx[i] - mx)
	}
	if sxx == 0 {
		return 0, false
	}
	return sxy / sxx, true
}

// fits fits every CCM, cloud limit and Service count that has rows: time
// over the rows whose nodes were all initialized, memory over the rows
// that finished every phase (a row stopped at the bound held less).
func fits(rows []Row) []Fit {
	type key struct {
		ccm      string
		limit    float64
		services int
	}
	var keys []key
	for _, r := range rows {
		k := key{r.CCM, r.CloudLimit, r.Services}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := slices.Index(ccmOrder, a.ccm) - slices.Index(ccmOrder, b.ccm); c != 0 {
			return c
		}
		if a.limit != b.limit {
			if a.limit < b.limit {
				return -1
			}
			return 1
		}
		return a.services - b.services
	})
	var out []Fit
	for _, k := range keys {
		f := Fit{CCM: k.ccm, CloudLimit: k.limit, Services: k.services}
		var tx, ty, mx, my, cx, cy []float64
		for _, r := range rows {
			if r.CCM != k.ccm || r.CloudLimit != k.limit || r.Services != k.services {
				continue
			}
			if r.NodeInit.Finished && r.Error == "" {
				f.TimeNodes = append(f.TimeNodes, r.Nodes)
				tx, ty = append(tx, float64(r.Nodes)), append(ty, r.NodeInit.Seconds)
			}
			if r.Idle != nil && r.Idle.CPUPerPeriod > 0 {
				f.IdleCPUNodes = append(f.IdleCPUNodes, r.Nodes)
				cx, cy = append(cx, float64(r.Nodes)), append(cy, r.Idle.CPUPerPeriod)
			}
			if r.finished() && r.PeakRSSMiB > 0 {
				f.RSSNodes = append(f.RSSNodes, r.Nodes)
				mx, my = append(mx, float64(r.Nodes)), append(my, r.PeakRSSMiB)
			}
		}
		f.TimeExponent, _ = logSlope(tx, ty)
		f.RSSExponent, _ = logSlope(mx, my)
		f.IdleCPUExponent, _ = logSlope(cx, cy)
		out = append(out, f)
	}
	return out
}
