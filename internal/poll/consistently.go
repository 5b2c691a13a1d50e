package poll

import (
	"testing"
	"time"
)

// Consistently is for what must NOT happen. Waiting a fixed time proves
// nothing: a controller that is slow, wedged or not started yet passes as
// well as a correct one. So Consistently first waits for a fact that the
// code under test had its chance: passes() (a counter such as a metric, a
// count of cloud calls or of attempts seen by a test double) growing by at
// least n from its value at the call. cond is checked on every poll until
// then and once more at the end; the test fails as soon as cond returns an
// error (what changed), or when the passes do not come within timeout.
func Consistently(t testing.TB, timeout time.Duration, what string, passes func() float64, n float64, cond func() error) {
	t.Helper()
	from := passes()
	deadline := time.Now().Add(timeout)
	for {
		if err := cond(); err != nil {
			t.Fatalf("no longer true: %s: %v", what, err)
		}
		got := passes()
		if got >= from+n {
			// The last pass may have acted just after the check above.
			if err := cond(); err != nil {
				t.Fatalf("no longer true: %s: %v", what, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %v more passes (saw %v) before checking that %s", timeout, n, got-from, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ConsistentlyUntil is Consistently for a state rather than a counter: the
// fact that the code had its chance is done() holding (say, every one of a
// set of objects handled), whenever it comes, even before the call. A
// count of objects in a state is no counter to give Consistently: one that
// reached the state before the call would never be counted.
func ConsistentlyUntil(t testing.TB, timeout time.Duration, what string, done func() bool, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if err := cond(); err != nil {
			t.Fatalf("no longer true: %s: %v", what, err)
		}
		if done() {
			if err := cond(); err != nil {
				t.Fatalf("no longer true: %s: %v", what, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for the code to have its chance before checking that %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Count adapts an integer counter (a cloud's call count, a double's) for
// Consistently's passes.
func Count[N ~int | ~int32 | ~int64 | ~uint64](f func() N) func() float64 {
	return func() float64 { return float64(f()) }
}
