package manager

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// However many callers ask /readyz at once, the provider is probed once per
// period, and each caller gets its answer.
func TestCachedCheckProbesOncePerPeriod(t *testing.T) {
	var calls atomic.Int32
	notReady := errors.New("plugin not ready")
	check := cachedCheck(time.Hour, func(context.Context) error {
		calls.Add(1)
		return notReady
	})
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := check(httptest.NewRequest("GET", "/readyz/provider", nil)); !errors.Is(err, notReady) {
				wrong.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("50 requests probed the provider %d times, want 1", n)
	}
	if n := wrong.Load(); n != 0 {
		t.Errorf("%d of 50 requests did not get the provider's answer", n)
	}
	again := cachedCheck(0, func(context.Context) error { calls.Add(1); return nil })
	for range 3 {
		_ = again(httptest.NewRequest("GET", "/readyz", nil))
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("with no period, 3 requests made %d probes, want 3", n-1)
	}
}
