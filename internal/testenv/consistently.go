package testenv

import (
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// Consistently is for what must NOT happen (internal/poll has the one
// implementation, for unit tests too). Waiting a fixed time proves
// nothing: a controller that is slow, wedged or not started yet passes as
// well as a correct one. So Consistently first waits for a fact that the
// code under test had its chance: passes() (a counter such as a metric, a
// count of cloud calls or of attempts seen by a test double) growing by at
// least n from its value at the call. cond is checked on every poll until
// then and once more at the end; the test fails as soon as cond returns an
// error (what changed), or when the passes do not come within timeout.
func Consistently(t testing.TB, timeout time.Duration, what string, passes func() float64, n float64, cond func() error) {
	t.Helper()
	poll.Consistently(t, timeout, what, passes, n, cond)
}

// ConsistentlyUntil is Consistently for a state rather than a counter: the
// fact that the code had its chance is done() holding, whenever it comes.
func ConsistentlyUntil(t testing.TB, timeout time.Duration, what string, done func() bool, cond func() error) {
	t.Helper()
	poll.ConsistentlyUntil(t, timeout, what, done, cond)
}

// Count adapts an integer counter for Consistently's passes.
func Count[N ~int | ~int32 | ~int64 | ~uint64](f func() N) func() float64 { return poll.Count(f) }
