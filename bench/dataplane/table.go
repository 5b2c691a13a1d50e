package main

import (
	"fmt"
	"strings"
	"time"
)

// table is the markdown of results: a line per row and peer.
func table(cfg Config, results []*Result) string {
	var b strings.Builder
	b.WriteString("| row | peer | requests/s | proxy CPU µs/request |")
	for _, l := range cfg.Loads {
		fmt.Fprintf(&b, " ms p50 / p99 / p99.9 at %.0f %% |", l*100)
	}
	b.WriteString(" peak RSS MiB |\n| --- | --- | ---: | ---: |")
	for range cfg.Loads {
		b.WriteString(" ---: |")
	}
	b.WriteString(" ---: |\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s |", r.Row, r.Peer)
		if r.Skipped != "" {
			fmt.Fprintf(&b, " %s |", r.Skipped)
			for range len(cfg.Loads) + 2 {
				b.WriteString(" |")
			}
			b.WriteString("\n")
			continue
		}
		fmt.Fprintf(&b, " %.0f", r.Max.perSecond())
		if r.Max.failed > 0 {
			fmt.Fprintf(&b, " (%d failed)", r.Max.failed)
		}
		b.WriteString(" |")
		if r.Peer == direct {
			b.WriteString(" — |")
		} else {
			fmt.Fprintf(&b, " %.1f |", r.CPUPerRequest*1e6)
		}
		for i := range cfg.Loads {
			if i >= len(r.Latency) {
				b.WriteString(" |")
				continue
			}
			l := r.Latency[i]
			fmt.Fprintf(&b, " %s / %s / %s", ms(l.quantile(0.5)), ms(l.quantile(0.99)), ms(l.quantile(0.999)))
			if l.failed > 0 {
				fmt.Fprintf(&b, " (%d failed)", l.failed)
			}
			b.WriteString(" |")
		}
		if r.Peer == direct {
			b.WriteString(" — |\n")
		} else {
			fmt.Fprintf(&b, " %.1f |\n", float64(r.PeakRSS)/(1<<20))
		}
	}
	var rates []string
	seen := map[Row]bool{}
	for _, r := range results {
		if len(r.Rates) > 0 && !seen[r.Row] {
			seen[r.Row] = true
			rates = append(rates, fmt.Sprintf("%s: %.0f", r.Row, r.Rates[0]/cfg.Loads[0]))
		}
	}
	if len(rates) > 0 {
		fmt.Fprintf(&b, "\nThe fixed rates are fractions of the slowest proxy's maximum in its row (requests/s): %s.\n", strings.Join(rates, "; "))
	}
	return b.String()
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}
