package dev

import (
	"context"
	"fmt"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// simCloud is what SimActions needs of the sim cloud.
type simCloud interface {
	Get(idOrName string) (simcloud.Instance, bool)
	SetState(id, state string) (simcloud.Instance, error)
	Settings() simcloud.Settings
	SetSettings(simcloud.Settings)
}

// SimActions are the sim cloud's faults and instance changes, for `outrigger
// dev --console-actions`.
type SimActions struct{ Cloud simCloud }

// List implements console.Actions.
func (a SimActions) List() []console.Action {
	return []console.Action{
		{Name: "stop", Label: "Stop instance", Target: "node"},
		{Name: "start", Label: "Start instance", Target: "node"},
		{Name: "terminate", Label: "Terminate instance", Target: "node"},
		{Name: "throttle", Label: "Throttle the cloud to 2 calls/s"},
		{Name: "errors", Label: "Fail half of the cloud's calls"},
		{Name: "clear-faults", Label: "Clear cloud faults"},
	}
}

// Do implements console.Actions.
func (a SimActions) Do(_ context.Context, name, target string) (string, error) {
	switch name {
	case "stop", "start", "terminate":
		in, ok := a.Cloud.Get(target)
		if !ok {
			return "", fmt.Errorf("no instance %q in the sim cloud", target)
		}
		state := map[string]string{"stop": simcloud.StateStopped, "start": simcloud.StateRunning, "terminate": simcloud.StateTerminated}[name]
		if _, err := a.Cloud.SetState(in.ID, state); err != nil {
			return "", fmt.Errorf("%s %s: %w", name, target, err)
		}
		return fmt.Sprintf("instance %s (%s) is %s", target, in.ID, state), nil
	case "throttle", "errors", "clear-faults":
		s := a.Cloud.Settings()
		switch name {
		case "throttle":
			s.RateLimit, s.RateBurst = 2, 2
		case "errors":
			s.ErrorRate = 0.5
		default:
			s.RateLimit, s.RateBurst, s.ErrorRate = 0, 0, 0
		}
		a.Cloud.SetSettings(s)
		return fmt.Sprintf("sim cloud: rate limit %g/s, error rate %g", s.RateLimit, s.ErrorRate), nil
	}
	return "", fmt.Errorf("%w %q", console.ErrUnknownAction, name)
}
