package manager

import (
	"errors"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// servedMetrics is what /metrics serves: controller-runtime's registry
// (Outrigger's own metrics, client-go's, every controller's) and, beside
// it, component-base's legacy registry, where providers written for the
// upstream CCM register theirs (AWS's, hcloud's and Linode's cloud API
// metrics) as upstream's /metrics serves them.
func servedMetrics() prometheus.Gatherer {
	return mergedGatherer{metrics.Registry, legacyregistry.DefaultGatherer}
}

// mergedGatherer serves both registries' families, a family that both hold
// (the Go runtime's and the process's, which each registers) once, from
// the first: a duplicate would make the scrape fail.
type mergedGatherer struct {
	first, second prometheus.Gatherer
}

func (m mergedGatherer) Gather() ([]*dto.MetricFamily, error) {
	out, errFirst := m.first.Gather()
	more, errSecond := m.second.Gather()
	seen := make(map[string]bool, len(out))
	for _, f := range out {
		seen[f.GetName()] = true
	}
	for _, f := range more {
		if !seen[f.GetName()] {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, errors.Join(errFirst, errSecond)
}
