package admission

import (
	"fmt"
	"sync"
	"time"
)

// holds keep a throttled object's calls from reaching the cloud before the
// cloud's retry hint for it has passed: the cloud said when to come back,
// and asking earlier (another controller, a periodic pass) would only be
// throttled again and count against the family. Other objects are not held.
type holds struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// hold keeps key's calls back until until.
func (h *holds) hold(key string, until, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.until) >= 1024 {
		// Expired holds are dropped as new ones come, so the map is as
		// large as the objects currently held, not as all ever throttled.
		for k, t := range h.until {
			if !t.After(now) {
				delete(h.until, k)
			}
		}
	}
	if until.After(h.until[key]) {
		h.until[key] = until
	}
}

// held reports whether key is held at now, and for how long still.
func (h *holds) held(key string, now time.Time) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	until, ok := h.until[key]
	if !ok {
		return 0, false
	}
	if !until.After(now) {
		delete(h.until, key)
		return 0, false
	}
	return until.Sub(now), true
}

// heldError is the error of a call kept back by its object's hold. It
// carries the rest of the hint, so callers requeue the object as they would
// for the cloud's own throttle.
type heldError struct{ wait time.Duration }

func (e *heldError) Error() string {
	return fmt.Sprintf("held back: the cloud throttled this object and asked to retry in %s", e.wait.Round(time.Millisecond))
}

// RetryAfter makes the error a retry hint (see provider.RetryAfter).
func (e *heldError) RetryAfter() time.Duration { return e.wait }
