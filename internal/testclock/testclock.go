// Package testclock is the clock tests step, for the components that take
// one (k8s.io/utils/clock) so that their windows (a call's hold, a sampling
// interval, a node sync window) pass when the test says, not by waiting
// them out.
package testclock

import (
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// Fake is k8s.io/utils/clock/testing's FakeClock, except that AfterFunc
// runs its function in a goroutine of its own. FakeClock runs it within
// Step, holding the clock's lock, so a function that reads the clock (the
// cloud layer's straggle does) would deadlock the test.
type Fake struct {
	*clocktesting.FakeClock
}

var _ clock.WithTicker = (*Fake)(nil)
var _ clock.WithDelayedExecution = (*Fake)(nil)

// New returns a Fake that reads t until stepped.
func New(t time.Time) *Fake { return &Fake{clocktesting.NewFakeClock(t)} }

// AfterFunc runs f in its own goroutine once the clock has been stepped d
// past now, unless the returned Timer is stopped first.
func (f *Fake) AfterFunc(d time.Duration, fn func()) clock.Timer {
	return f.FakeClock.AfterFunc(d, func() { go fn() })
}
