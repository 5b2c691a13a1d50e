package admission

import (
	"context"
	"sync"
)

// slots hold at most one call in flight per object. A call for an object
// whose previous call is still within its timeout waits for it (two
// controllers may ask about one node at the same moment, which is no
// error); a call for an object whose previous call was abandoned after its
// timeout fails at once with ErrCallInFlight rather than hold a worker for
// as long as a hung provider keeps it.
type slots struct {
	mu sync.Mutex
	// held has an entry only while a call for the key runs, so the map is
	// as large as the calls in flight, not as the objects ever seen.
	held map[string]*slot
}

type slot struct {
	done          chan struct{} // closed when the call returns
	abandonedOnce sync.Once
	abandoned     chan struct{} // closed when its caller gave up on it
}

func (s *slot) abandon() { s.abandonedOnce.Do(func() { close(s.abandoned) }) }

// acquire takes key's slot, waiting within ctx while a live call holds it.
func (s *slots) acquire(ctx context.Context, key string) (*slot, error) {
	for {
		s.mu.Lock()
		cur, ok := s.held[key]
		if !ok {
			sl := &slot{done: make(chan struct{}), abandoned: make(chan struct{})}
			s.held[key] = sl
			s.mu.Unlock()
			return sl, nil
		}
		s.mu.Unlock()
		select {
		case <-cur.done:
			// Free: race the other waiters for it.
		case <-cur.abandoned:
			return nil, ErrCallInFlight
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *slots) release(key string, sl *slot) {
	s.mu.Lock()
	if s.held[key] == sl {
		delete(s.held, key)
	}
	s.mu.Unlock()
	close(sl.done)
}

// abandonedRunning reports whether key's call was abandoned and still runs.
func (s *slots) abandonedRunning(key string) bool {
	s.mu.Lock()
	cur, ok := s.held[key]
	s.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-cur.abandoned:
		return true
	default:
		return false
	}
}

// inFlight is how many objects have a call running, for tests.
func (s *slots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}
