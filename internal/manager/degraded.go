package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// Event reasons of a provider's method family that is hung on many objects
// (calls abandoned at their deadline and not returned: cloud.Degraded).
const (
	ReasonCloudCallsDegraded  = "CloudCallsDegraded"
	ReasonCloudCallsRecovered = "CloudCallsRecovered"
)

// degradedEvents says in an Event, once per change, when a provider's
// method family becomes degraded and when it recovers. There is no object a
// family belongs to: the Events are on this Outrigger's leader-election
// Lease, where `kubectl describe lease` shows them.
type degradedEvents struct {
	// degraded maps "provider/family" to its abandoned calls now.
	degraded func() map[string]int64
	recorder record.EventRecorder
	lease    *corev1.ObjectReference
	period   time.Duration

	last map[string]bool
}

func (d *degradedEvents) NeedLeaderElection() bool { return true }

func (d *degradedEvents) Start(ctx context.Context) error {
	t := time.NewTicker(d.period)
	defer t.Stop()
	for {
		d.check()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// check records an Event for each family that changed since the last check.
func (d *degradedEvents) check() {
	now := d.degraded()
	for _, f := range slices.Sorted(maps.Keys(now)) {
		if !d.last[f] {
			d.recorder.Eventf(d.lease, corev1.EventTypeWarning, ReasonCloudCallsDegraded,
				"Provider method family %s has %d calls abandoned at their deadline that the provider has not returned from: it is hung on those objects; the others go on", f, now[f])
		}
	}
	for _, f := range slices.Sorted(maps.Keys(d.last)) {
		if _, still := now[f]; !still {
			d.recorder.Eventf(d.lease, corev1.EventTypeNormal, ReasonCloudCallsRecovered,
				"Provider method family %s recovered: the provider returned from its abandoned calls", f)
		}
	}
	d.last = map[string]bool{}
	for f := range now {
		d.last[f] = true
	}
}

// degradedList is the console's view of the same.
func degradedList(degraded func() map[string]int64) func() []string {
	return func() []string {
		now := degraded()
		out := make([]string, 0, len(now))
		for _, f := range slices.Sorted(maps.Keys(now)) {
			out = append(out, fmt.Sprintf("%s: %d calls hung", f, now[f]))
		}
		return out
	}
}
