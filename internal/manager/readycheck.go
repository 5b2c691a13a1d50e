package manager

import (
	"context"
	"net/http"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// cachedCheck is a readiness check that asks check at most once per ttl
// and one call at a time, answering from the last result meanwhile:
// /readyz is open to whoever reaches the port, and each of their requests
// must not become a call to the provider (a plugin's Probe). A call is
// bounded by 2 s and not tied to the request, so a caller that hangs up
// early leaves no canceled answer behind.
func cachedCheck(ttl time.Duration, check func(context.Context) error) healthz.Checker {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return func(*http.Request) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		last, at = check(ctx), time.Now()
		return last
	}
}
