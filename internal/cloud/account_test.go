package cloud

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/poll"
)

// waiting counts the calls waiting on a.
func (a *Account) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, q := range a.queues {
		n += len(q)
	}
	return n
}

// A tenant with many calls waiting on a shared account does not starve
// another: the quiet tenant's calls are let through in turn, each within a
// couple of the busy tenant's calls, not behind all of them.
func TestAccountServesTenantsInTurn(t *testing.T) {
	a := NewAccount("sim/test", 200, 1)
	var mu sync.Mutex
	var order []string
	a.granted = func(tenant string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, tenant)
	}
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() { _ = a.Wait(context.Background(), "busy") })
	}
	// Most of them queued before the quiet tenant asks.
	poll.Until(t, 30*time.Second, "30 of the busy tenant's calls queued", func() bool { return a.waiting() >= 30 })
	mu.Lock()
	from := len(order)
	mu.Unlock()
	for range 5 {
		wg.Go(func() { _ = a.Wait(context.Background(), "quiet") })
	}
	wg.Wait()
	quiet := 0
	for i, tenant := range order[from:] {
		if tenant != "quiet" {
			continue
		}
		quiet++
		// At most one busy call between two quiet ones, plus the
		// quiet goroutines' own arrival.
		if i > 2*quiet+4 {
			t.Errorf("quiet call %d let through %d calls after it asked: %v", quiet, i+1, order[from:])
		}
	}
	if quiet != 5 || len(order) != 65 {
		t.Errorf("%d quiet calls of 5, %d calls of 65 let through", quiet, len(order))
	}
}

// The account holds its tenants together to its rate: 21 calls at 100/s
// with a burst of 1 take at least 0.2 s, whichever tenants make them.
func TestAccountHoldsItsRate(t *testing.T) {
	a := NewAccount("sim/test", 100, 1)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 21 {
		tenant := []string{"a", "b", "c"}[i%3]
		wg.Go(func() { _ = a.Wait(context.Background(), tenant) })
	}
	wg.Wait()
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Errorf("21 calls at 100/s went in %s", d)
	}
}

// A call given up while waiting returns its context's error, and the
// budget goes on to the others.
func TestAccountWaitGivenUp(t *testing.T) {
	a := NewAccount("sim/test", 1, 1)
	if err := a.Wait(context.Background(), "a"); err != nil { // the burst
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := a.Wait(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want the deadline", err)
	}
	if err := (*Account)(nil).Wait(context.Background(), "a"); err != nil {
		t.Errorf("no account: %v", err)
	}
	if err := NewAccount("free", 0, 0).Wait(context.Background(), "a"); err != nil {
		t.Errorf("unlimited account: %v", err)
	}
}

// Tenants naming one account get one budget; another account its own.
func TestAccountsShareByName(t *testing.T) {
	s := NewAccounts(10, 0)
	first, again := s.Get("x"), s.Get("x")
	if first != again || first == s.Get("y") {
		t.Error("accounts not shared by name")
	}
}
