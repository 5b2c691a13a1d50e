package cloud

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Account is one cloud account's call budget, shared by every layer whose
// calls the account pays for: the tenants of a multi-tenant Outrigger that
// name the same account. Its limit is the account's (--cloud-qps); each
// layer keeps its own adaptive limits below it.
//
// Calls are let through in turn by tenant, not in arrival order: a tenant
// with a thousand calls waiting delays another tenant's next call by at
// most one call of its own, so no tenant starves another, and a tenant
// alone gets the whole budget. A single rate.Limiter shared by all would
// serve them in arrival order, letting a busy tenant starve a quiet one.
type Account struct {
	name    string
	limiter *rate.Limiter

	mu sync.Mutex
	// queues are the waiting calls by tenant, oldest first; ring is the
	// tenants with waiting calls in turn order, next the one served next.
	queues map[string][]*accountWaiter
	ring   []string
	next   int
	// dispatching: a goroutine hands out the budget while calls wait.
	dispatching bool
	// granted, if set, hears each tenant served, in order (tests).
	granted func(tenant string)
}

type accountWaiter struct {
	ready chan struct{}
	// done: granted or given up; under Account.mu.
	done bool
}

// NewAccount returns the budget of account name: qps calls per second, in
// bursts of up to burst (default max(1, qps)). qps <= 0: unlimited.
func NewAccount(name string, qps float64, burst int) *Account {
	limit := rate.Inf
	if qps > 0 {
		limit = rate.Limit(qps)
	}
	if burst <= 0 {
		burst = max(1, int(qps))
	}
	return &Account{name: name, limiter: rate.NewLimiter(limit, burst), queues: map[string][]*accountWaiter{}}
}

// Name is the account's name.
func (a *Account) Name() string { return a.name }

// Wait blocks until tenant's call may go under the account's budget, or
// ctx ends.
func (a *Account) Wait(ctx context.Context, tenant string) error {
	if a == nil || a.limiter.Limit() == rate.Inf {
		return nil
	}
	w := &accountWaiter{ready: make(chan struct{})}
	a.mu.Lock()
	if len(a.queues[tenant]) == 0 {
		a.ring = append(a.ring, tenant)
	}
	a.queues[tenant] = append(a.queues[tenant], w)
	if !a.dispatching {
		a.dispatching = true
		go a.dispatch()
	}
	a.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		if w.done { // granted meanwhile: the call may go
			return nil
		}
		w.done = true // skipped by dispatch
		return ctx.Err()
	}
}

// dispatch hands each unit of budget to the next tenant in turn while
// calls wait, then ends.
func (a *Account) dispatch() {
	for {
		r := a.limiter.Reserve()
		if d := r.Delay(); d > 0 {
			time.Sleep(d) // the budget's own pace, not a wait for a condition
		}
		a.mu.Lock()
		w, tenant := a.pop()
		if w == nil {
			a.dispatching = false
			a.mu.Unlock()
			// Nobody was waiting: the unit goes back to the budget.
			r.Cancel()
			return
		}
		if a.granted != nil { // before the call goes: its order is the grant's
			a.granted(tenant)
		}
		w.done = true
		close(w.ready)
		a.mu.Unlock()
	}
}

// pop takes the oldest waiting call of the tenant whose turn it is,
// skipping calls given up; nil when none waits. Under a.mu.
func (a *Account) pop() (*accountWaiter, string) {
	for len(a.ring) > 0 {
		if a.next >= len(a.ring) {
			a.next = 0
		}
		tenant := a.ring[a.next]
		q := a.queues[tenant]
		var w *accountWaiter
		for len(q) > 0 && w == nil {
			if !q[0].done {
				w = q[0]
			}
			q = q[1:]
		}
		if len(q) == 0 {
			delete(a.queues, tenant)
			a.ring = slices.Delete(a.ring, a.next, a.next+1)
		} else {
			a.queues[tenant] = q
			a.next++
		}
		if w != nil {
			return w, tenant
		}
	}
	return nil, ""
}

// Accounts are the budgets of one process's accounts, made on first use.
type Accounts struct {
	qps   float64
	burst int

	mu sync.Mutex
	by map[string]*Account
}

// NewAccounts returns the budgets of accounts of qps calls per second
// each, in bursts of burst (see NewAccount).
func NewAccounts(qps float64, burst int) *Accounts {
	return &Accounts{qps: qps, burst: burst, by: map[string]*Account{}}
}

// Get returns account name's budget.
func (s *Accounts) Get(name string) *Account {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.by[name]
	if a == nil {
		a = NewAccount(name, s.qps, s.burst)
		s.by[name] = a
	}
	return a
}
