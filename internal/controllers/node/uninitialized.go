package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/platform"
)

// The nodes still waiting for initialization, counted from the node cache
// when /metrics is scraped: what an alert on nodes stuck uninitialized
// needs, which no counter of attempts can say. Labelled by tenant (tenant
// mode: one process, many clusters; "" for a single cluster) and
// controller; a tenant's series go when its controller stops, with its
// source.
var (
	uninitializedDesc = prometheus.NewDesc("outrigger_nodes_uninitialized",
		"Nodes of the controller's platforms that still carry the node.cloudprovider.kubernetes.io/uninitialized taint, reported by the leader.",
		[]string{"tenant", "controller"}, nil)
	oldestDesc = prometheus.NewDesc("outrigger_node_uninitialized_oldest_seconds",
		"Age of the oldest node of the controller's platforms that still carries the uninitialized taint (0: none), reported by the leader.",
		[]string{"tenant", "controller"}, nil)
)

// uninitialized is the collector: one source per running node controller
// (a leader's; several providers in one Outrigger have one each).
type uninitialized struct {
	mu      sync.Mutex
	sources map[*refresher]uninitializedSource
	now     func() time.Time
}

type uninitializedSource struct {
	tenant     string
	controller string
	nodes      cachednodes.Lister
	platforms  platform.Set
}

var uninitializedNodes = &uninitialized{sources: map[*refresher]uninitializedSource{}, now: time.Now}

func init() { metrics.Registry.MustRegister(uninitializedNodes) }

// add counts a controller's nodes until ctx ends (the leader's term).
func (u *uninitialized) add(ctx context.Context, key *refresher, src uninitializedSource) {
	u.mu.Lock()
	u.sources[key] = src
	u.mu.Unlock()
	go func() {
		<-ctx.Done()
		u.mu.Lock()
		delete(u.sources, key)
		u.mu.Unlock()
	}()
}

func (u *uninitialized) Describe(ch chan<- *prometheus.Desc) {
	ch <- uninitializedDesc
	ch <- oldestDesc
}

func (u *uninitialized) Collect(ch chan<- prometheus.Metric) {
	u.mu.Lock()
	sources := make([]uninitializedSource, 0, len(u.sources))
	for _, s := range u.sources {
		sources = append(sources, s)
	}
	u.mu.Unlock()
	now := u.now()
	// Summed by tenant and controller name: several node controllers of
	// one cluster's name in one process (tests; a tenant restarting while
	// its last run stops) would be refused by the registry as collected
	// twice, one series each.
	type key struct{ tenant, controller string }
	type figure struct {
		count  int
		oldest time.Duration
	}
	byController := map[key]*figure{}
	var order []key
	for _, s := range sources {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		nodes, err := s.nodes(ctx)
		cancel()
		if err != nil {
			continue // the cache is gone or not synced: no figure is better than a wrong one
		}
		k := key{s.tenant, s.controller}
		f := byController[k]
		if f == nil {
			f = &figure{}
			byController[k] = f
			order = append(order, k)
		}
		for _, n := range nodes {
			if !isUninitialized(n) || s.platforms.Of(n) == platform.NotOwned {
				continue
			}
			f.count++
			f.oldest = max(f.oldest, now.Sub(n.CreationTimestamp.Time))
		}
	}
	for _, k := range order {
		f := byController[k]
		ch <- prometheus.MustNewConstMetric(uninitializedDesc, prometheus.GaugeValue, float64(f.count), k.tenant, k.controller)
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, f.oldest.Seconds(), k.tenant, k.controller)
	}
}
