package sharing

import (
	"sync"
	"time"

	cloudprovider "k8s.io/cloud-provider"
)

// Answered remembers the metadata a node's initialization got from the
// cloud, and when, so that the address refresh does not ask about the node
// again in the same period: while thousands of nodes join, the refresh
// would otherwise spend the cloud's rate on nodes just answered, and slow
// the initializations still waiting for it.
type Answered struct {
	mu sync.Mutex
	at map[string]answeredAt
}

type answeredAt struct {
	t        time.Time
	metadata *cloudprovider.InstanceMetadata
}

// NewAnswered remembers nothing yet.
func NewAnswered() *Answered { return &Answered{at: map[string]answeredAt{}} }

// Record notes that node's metadata was answered at t.
func (a *Answered) Record(node string, t time.Time, metadata *cloudprovider.InstanceMetadata) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[node] = answeredAt{t, metadata}
}

// Fresh returns node's metadata if it was answered less than period
// before now. Older records are forgotten as they are seen, and Prune
// forgets the rest.
func (a *Answered) Fresh(node string, now time.Time, period time.Duration) (*cloudprovider.InstanceMetadata, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec, ok := a.at[node]
	if !ok {
		return nil, false
	}
	if now.Sub(rec.t) >= period {
		delete(a.at, node)
		return nil, false
	}
	return rec.metadata, true
}

// Prune forgets every record older than period before now (nodes deleted
// right after joining would otherwise stay).
func (a *Answered) Prune(now time.Time, period time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n, rec := range a.at {
		if now.Sub(rec.t) >= period {
			delete(a.at, n)
		}
	}
}
