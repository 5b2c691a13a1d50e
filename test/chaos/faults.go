package chaos

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// runFaults injects each fault, holds it, and lifts it. An error means the
// environment could not be put back (a restart failed): the run is void.
func (h *harness) runFaults(ctx context.Context, steps []Step) error {
	for _, s := range steps {
		if !h.at(ctx, s.At) {
			return nil
		}
		h.logf("fault %s (hold %v)", s.Kind, s.Hold)
		lift, err := h.inject(ctx, s)
		if err != nil {
			return fmt.Errorf("injecting %s: %w", s.Kind, err)
		}
		h.report.fault(s.Kind)
		if !h.at(ctx, s.At+s.Hold) {
			// Still put the environment back, for tearDown.
			ctx = context.WithoutCancel(ctx)
		}
		if err := lift(ctx); err != nil {
			return fmt.Errorf("lifting %s: %w", s.Kind, err)
		}
		h.mu.Lock()
		h.lastLift = time.Now()
		h.mu.Unlock()
	}
	return nil
}

// inject starts fault s and returns what lifts it.
func (h *harness) inject(ctx context.Context, s Step) (func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	switch s.Kind {
	case KillOutrigger, KillSharedCCM, KillSecondCluster:
		// Outrigger's replicas come first, then the second CCM's, then
		// the second cluster's.
		i := int(s.Pick) % h.cfg.Replicas
		switch s.Kind {
		case KillSharedCCM:
			i = h.cfg.Replicas + int(s.Pick)%h.cfg.SharedReplicas
		case KillSecondCluster:
			i = h.cfg.Replicas + h.cfg.SharedReplicas + int(s.Pick)%h.cfg.SecondReplicas
		}
		h.stopReplica(i, syscall.SIGKILL)
		return func(context.Context) error { return h.startReplica(i) }, nil
	case ObjectHang:
		return h.injectObjectHang(ctx, s)
	case PluginRestart:
		return h.injectPluginRestart(ctx, s)
	case LostResponses:
		before, _ := h.proxy.counts()
		h.proxy.lose(lostShare)
		// Writes to lose: nodes to give pod CIDRs, routes and
		// addresses, Services to give load balancers.
		for range lostNodes {
			if err := h.joinNode(); err != nil {
				h.logf("  node join: %v", err)
			}
		}
		for i := range lostServices {
			if err := h.createService(ctx, s.Pick+uint32(i)*2654435761); err != nil {
				h.logf("  Service: %v", err)
			}
		}
		return func(context.Context) error {
			h.proxy.lose(0)
			lost, committed := h.proxy.counts()
			h.report.lostResponses(lost, committed, h.proxy.lostByRequest())
			h.logf("  %d answers lost (%d in all, %d of them successes)", lost-before, lost, committed)
			return nil
		}, nil
	case KillAPIServer:
		if err := h.cp.KillAPIServer(); err != nil {
			return nil, err
		}
		return h.cp.StartAPIServer, nil
	case PauseEtcd:
		if err := h.cp.PauseEtcd(); err != nil {
			return nil, err
		}
		return func(context.Context) error { return h.cp.ResumeEtcd() }, nil
	case InstanceDelete:
		name, err := h.deleteInstance(ctx, s.Pick)
		if name != "" {
			h.logf("  deleted instance %s", name)
		}
		return none, err
	}
	// The cloud's faults are its settings for the hold.
	set := simcloud.Settings{}
	switch s.Kind {
	case CloudErrors:
		set.ErrorRate = 0.5
	case Cloud429:
		// Nearly every call throttled, each answer asking for a pause.
		set.RateLimit, set.RateBurst = 2, 2
		set.RetryAfter = simcloud.Duration{Duration: 2 * time.Second}
	case CloudHang:
		set.HangFor = simcloud.Duration{Duration: 30 * time.Second}
	case CloudQuota:
		// Nothing more fits: every quota at what is in use.
		live := len(h.liveInstances(""))
		set.MaxInstances = max(1, live)
		set.MaxLoadBalancers = max(1, len(h.cloud.LoadBalancers()))
		set.MaxRoutes = max(1, len(h.cloud.Routes()))
	default:
		return nil, fmt.Errorf("unknown fault %q", s.Kind)
	}
	h.cloud.SetSettings(set)
	return func(context.Context) error { h.cloud.SetSettings(simcloud.Settings{}); return nil }, nil
}
