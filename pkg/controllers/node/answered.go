package node

import (
	"sync"
	"time"
)

// answered remembers when initialization last got a node's metadata from
// the cloud, so that the address refresh does not ask about the node again
// in the same period: while thousands of nodes join, the refresh would
// otherwise spend the cloud's rate on nodes just answered, and slow the
// initializations still waiting for it.
type answered struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newAnswered() *answered { return &answered{at: map[string]time.Time{}} }

// record notes that node's metadata was answered at t.
func (a *answered) record(node string, t time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[node] = t
}

// fresh tells whether node was answered less than period before now. Older
// records are forgotten as they are seen, and prune forgets the rest.
func (a *answered) fresh(node string, now time.Time, period time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[node]
	if !ok {
		return false
	}
	if now.Sub(t) >= period {
		delete(a.at, node)
		return false
	}
	return true
}

// prune forgets every record older than period before now (nodes deleted
// right after joining would otherwise stay).
func (a *answered) prune(now time.Time, period time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, t := range a.at {
		if now.Sub(t) >= period {
			delete(a.at, n)
		}
	}
}
