package admission

import (
	"testing"
	"time"
)

// Holds after timeouts in a row double up to maxTimeoutHold; an answer
// lifts them, but not a throttle's hold, which lasts its hint.
func TestHolds(t *testing.T) {
	now := time.Now()
	const timeout = 30 * time.Second
	type step struct {
		what string // "timeout", "answer", "throttle"
		// want is how long the object is held afterwards (0: not held).
		want time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"timeouts in a row double", []step{{"timeout", 30 * time.Second}, {"timeout", time.Minute}, {"timeout", 2 * time.Minute}}},
		{"up to the cap", []step{{"timeout", 30 * time.Second}, {"timeout", time.Minute}, {"timeout", 2 * time.Minute}, {"timeout", 4 * time.Minute}, {"timeout", maxTimeoutHold}, {"timeout", maxTimeoutHold}}},
		{"an answer lifts it and starts over", []step{{"timeout", 30 * time.Second}, {"timeout", time.Minute}, {"answer", 0}, {"timeout", 30 * time.Second}}},
		{"a throttle's hold outlasts an answer", []step{{"throttle", 45 * time.Second}, {"answer", 45 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolds()
			for i, s := range tc.steps {
				switch s.what {
				case "timeout":
					h.timedOut("k", timeout, now)
				case "answer":
					h.answered("k", now)
				case "throttle":
					h.throttled("k", now.Add(45*time.Second), now)
				}
				var got time.Duration
				if e := h.held("k", now); e != nil {
					got = e.wait
				}
				if got != s.want {
					t.Errorf("step %d (%s): held %v, want %v", i, s.what, got, s.want)
				}
			}
			if h.held("other", now) != nil {
				t.Error("another object is held")
			}
		})
	}
}
