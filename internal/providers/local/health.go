package local

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// target is one health endpoint: a node address and a port.
type target struct {
	ip   netip.Addr
	port int32
}

// prober health-checks every target the load balancers use, once per
// interval however many load balancers share it: all Services without
// externalTrafficPolicy: Local share kube-proxy's port, so a node costs one
// probe per interval, not one per Service.
type prober struct {
	s      settings
	client *http.Client

	mu      sync.Mutex
	targets map[target]*probeState
	cancel  context.CancelFunc
}

type probeState struct {
	refs     int
	healthy  bool
	failures int
}

func newProber(s settings) *prober {
	return &prober{
		s:       s,
		client:  &http.Client{Timeout: s.timeout, Transport: &http.Transport{DisableKeepAlives: true}},
		targets: map[target]*probeState{},
	}
}

// acquire registers interest in t; a new target counts as healthy until
// probes say otherwise, and is probed at once.
func (p *prober) acquire(t target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.targets[t]
	if !ok {
		st = &probeState{healthy: true}
		p.targets[t] = st
		if !p.s.healthDisabled {
			go p.probe(context.Background(), t)
		}
	}
	st.refs++
	if p.cancel == nil && !p.s.healthDisabled {
		ctx, cancel := context.WithCancel(context.Background())
		p.cancel = cancel
		go p.loop(ctx)
	}
}

func (p *prober) release(t target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.targets[t]; ok {
		if st.refs--; st.refs <= 0 {
			delete(p.targets, t)
		}
	}
}

func (p *prober) healthy(t target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.targets[t]
	return !ok || st.healthy
}

func (p *prober) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
}

func (p *prober) loop(ctx context.Context) {
	t := time.NewTicker(p.s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		targets := make([]target, 0, len(p.targets))
		for tg := range p.targets {
			targets = append(targets, tg)
		}
		p.mu.Unlock()
		// Probes run in parallel, at most 64 at once, so a thousand nodes
		// are checked within an interval.
		sem := make(chan struct{}, 64)
		var wg sync.WaitGroup
		for _, tg := range targets {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				p.probe(ctx, tg)
			}()
		}
		wg.Wait()
	}
}

// probe GETs /healthz; any 2xx is healthy, as kube-proxy answers 200 when
// healthy and 503 when not.
func (p *prober) probe(ctx context.Context, t target) {
	url := fmt.Sprintf("http://%s/healthz", netip.AddrPortFrom(t.ip, uint16(t.port)))
	ok := false
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil {
		if resp, err := p.client.Do(req); err == nil {
			resp.Body.Close()
			ok = resp.StatusCode >= 200 && resp.StatusCode < 300
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st, found := p.targets[t]
	if !found {
		return
	}
	was := st.healthy
	if ok {
		st.failures = 0
		st.healthy = true
	} else if st.failures++; st.failures >= p.s.unhealthyThreshold {
		st.healthy = false
	}
	if was != st.healthy {
		klog.V(2).InfoS("Backend health changed", "target", url, "healthy", st.healthy)
	}
}
