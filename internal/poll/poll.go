// Package poll is the tests' one way of waiting: for a fact to hold
// (Eventually, Until), or for the code under test to have had its chance
// before checking that something did not happen (Consistently). It needs
// nothing but the testing package, so unit tests use it as the integration
// tests do (internal/testenv's helpers are these).
package poll

import (
	"testing"
	"time"
)

// The interval between polls starts short, for facts that come at once,
// and doubles up to maxInterval, so a long wait does not spin.
const (
	firstInterval = time.Millisecond
	maxInterval   = 50 * time.Millisecond
)

// Eventually polls cond until it returns true, failing the test when
// timeout passes first (with cond's last error, if any).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for interval := firstInterval; ; interval = min(2*interval, maxInterval) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(interval)
	}
	if lastErr != nil {
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

// Until is Eventually for a condition without an error.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() (bool, error) { return cond(), nil })
}
