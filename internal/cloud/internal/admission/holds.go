package admission

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// holds keep an object's calls from reaching the cloud for a while:
//   - after a throttle, until the cloud's retry hint for it has passed: the
//     cloud said when to come back, and asking earlier (another controller,
//     a periodic pass) would only be throttled again and count against the
//     family;
//   - after a timeout, for the timeout again, doubling with each timeout in
//     a row up to maxTimeoutHold: an object the cloud does not answer for
//     (a provider stuck on it) would otherwise take a place in the family's
//     concurrency for a whole timeout at every retry and every node sync,
//     and with enough such objects leave none to the others.
//
// Other objects are not held.
type holds struct {
	mu      sync.Mutex
	entries map[string]hold
}

type hold struct {
	until time.Time
	// timeouts counts the object's timeouts in a row; the next hold after
	// a timeout is twice the last.
	timeouts int
	// why says what the caller is told while it lasts.
	why string
	// throttle: the hold is the cloud's hint, which an answer about the
	// object does not lift (a timeout's hold it does).
	throttle bool
}

// maxTimeoutHold bounds the hold after timeouts in a row.
const maxTimeoutHold = 5 * time.Minute

// forget is how long a past hold is remembered (its timeouts in a row).
const forget = 2 * maxTimeoutHold

func newHolds() holds { return holds{entries: map[string]hold{}} }

// throttled keeps key's calls back until until, the cloud's hint.
func (h *holds) throttled(key string, until, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	e := h.entries[key]
	if until.After(e.until) {
		e.until, e.why, e.throttle = until, "the cloud throttled this object and asked to retry", true
	}
	h.entries[key] = e
}

// timedOut holds key's calls back after a call that got no answer within
// timeout, and returns how long.
func (h *holds) timedOut(key string, timeout time.Duration, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	e := h.entries[key]
	e.timeouts++
	d := timeout
	for i := 1; i < e.timeouts && d < maxTimeoutHold; i++ {
		d *= 2
	}
	d = max(timeout, min(d, maxTimeoutHold))
	if until := now.Add(d); until.After(e.until) {
		e.until = until
		e.why = fmt.Sprintf("its last %d call(s) got no answer within %s; retried", e.timeouts, timeout)
		e.throttle = false
	}
	h.entries[key] = e
	return d
}

// answered forgets key's timeouts in a row and lifts a hold they made: the
// cloud answered for it (a late answer of an abandoned call too). A
// throttle's hold stays.
func (h *holds) answered(key string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[key]
	if !ok {
		return
	}
	if !e.throttle || !e.until.After(now) {
		delete(h.entries, key)
		return
	}
	e.timeouts = 0
	h.entries[key] = e
}

// prune drops what is no longer remembered, once the map is large, so it
// is as large as the objects held lately, not as all ever held. h.mu held.
func (h *holds) prune(now time.Time) {
	if len(h.entries) < 1024 {
		return
	}
	for k, e := range h.entries {
		if now.Sub(e.until) > forget {
			delete(h.entries, k)
		}
	}
}

// held returns the error of a call for key at now while key is held, or
// nil.
func (h *holds) held(key string, now time.Time) *heldError {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.entries[key]
	if !ok || !e.until.After(now) {
		return nil
	}
	return &heldError{wait: e.until.Sub(now), why: e.why, timedOut: !e.throttle}
}

// ErrTimedOutBefore is wrapped by the error of a call held back because
// its object's last calls got no answer within the timeout.
var ErrTimedOutBefore = errors.New("the object's last calls timed out")

// heldError is the error of a call kept back by its object's hold. It
// carries the rest of the hold, so callers requeue the object as they would
// for the cloud's own throttle.
type heldError struct {
	wait     time.Duration
	why      string
	timedOut bool
}

// Unwrap is ErrTimedOutBefore for a hold after timeouts.
func (e *heldError) Unwrap() error {
	if e.timedOut {
		return ErrTimedOutBefore
	}
	return nil
}

func (e *heldError) Error() string {
	return fmt.Sprintf("held back: %s in %s", e.why, e.wait.Round(time.Millisecond))
}

// RetryAfter makes the error a retry hint (see provider.RetryAfter).
func (e *heldError) RetryAfter() time.Duration { return e.wait }
