package main

import (
	"fmt"
	"strings"
	"time"
)

// render is the markdown of the rows: one table of every figure, then, per
// tenant count, Outrigger's memory and idle CPU against the upstream
// CCMs'.
func render(cfg config, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Each tenant: %d nodes at the start; in the churn %d more nodes and %d LoadBalancer Services, all tenants at once. "+
		"One sim cloud account for all, %g calls/s (429 beyond), %s a call.\n\n",
		cfg.nodes, cfg.churnNodes, cfg.churnServices, cfg.qps, cfg.latency)
	b.WriteString("| tenants | CCM | processes | RSS idle (MiB) | peak RSS (MiB) | CPU idle (cores) | converge (s) | churn served (s) | churn CPU (s) | cloud calls, churn | refused (429), churn | refused, whole run | new tenant served (s) | killed replica's tenants served again (s) |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		failover := "—"
		if r.failoverTenants > 0 {
			failover = fmt.Sprintf("%s (%d tenants)", secs(r.failover), r.failoverTenants)
		}
		fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %.0f | %.3f | %s | %s | %.1f | %d | %d | %d | %s | %s |\n",
			r.tenants, r.ccm.name, r.processes, r.rssIdle, r.rssPeak, r.cpuIdle, secs(r.converge), secs(r.churn),
			r.cpuChurn, r.callsChurn, r.refusedChurn, r.refusedTotal, secs(r.newTenant), failover)
	}
	b.WriteString("\n")
	for _, n := range tenantCounts(rows) {
		var one, up *row
		for i := range rows {
			if rows[i].tenants != n {
				continue
			}
			switch rows[i].ccm.key {
			case "outrigger":
				one = &rows[i]
			case "upstream":
				up = &rows[i]
			}
		}
		if one == nil || up == nil {
			continue
		}
		fmt.Fprintf(&b, "- %d tenants: one Outrigger's resident memory is %.0f %% of the %d upstream CCMs' (%.0f MiB against %.0f MiB), its idle CPU %.3f cores against %.3f; cloud calls refused in the churn: %d against %d.\n",
			n, 100*one.rssIdle/up.rssIdle, up.processes, one.rssIdle, up.rssIdle, one.cpuIdle, up.cpuIdle, one.refusedChurn, up.refusedChurn)
	}
	return b.String()
}

func tenantCounts(rows []row) []int {
	var out []int
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1] != r.tenants {
			out = append(out, r.tenants)
		}
	}
	return out
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// renderIsolation is the table of the healthy tenants' times with one
// tenant broken each way, beside none broken.
func renderIsolation(cfg config, rows []isolationRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nOne Outrigger, %d tenants, the first broken from the start; the times are the %d others':\n\n", cfg.isolation, cfg.isolation-1)
	b.WriteString("| the first tenant | others' nodes initialized (s) | others' churn served (s) |\n| --- | ---: | ---: |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.way, secs(r.converge), secs(r.churn))
	}
	return b.String()
}
