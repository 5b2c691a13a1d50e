package main

import (
	"context"
	"sync"
	"time"

	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

// sampleEvery is how often the sampler reads the sim cloud's call counts.
const sampleEvery = 100 * time.Millisecond

// sampler reads the sim cloud's call counts every sampleEvery, so that a
// run can report its busiest second, not only its totals: a burst of calls
// (or of 429s) hides in an average.
type sampler struct {
	mu      sync.Mutex
	samples []sample
}

type sample struct {
	at               time.Time
	total, throttled int64
}

// sample runs until ctx ends.
func (s *sampler) run(ctx context.Context, counts func() simcloud.Calls) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		c := counts()
		s.mu.Lock()
		s.samples = append(s.samples, sample{time.Now(), c.Total, c.Throttled})
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// peak is the most calls (and, separately, 429s) in any one-second window
// between from and to. The counts must not have been reset in between.
func (s *sampler) peak(from, to time.Time) (calls, throttled int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []sample
	for _, x := range s.samples {
		if !x.at.Before(from) && !x.at.After(to) {
			in = append(in, x)
		}
	}
	for i := range in {
		for j := i + 1; j < len(in) && in[j].at.Sub(in[i].at) <= time.Second; j++ {
			calls = max(calls, in[j].total-in[i].total)
			throttled = max(throttled, in[j].throttled-in[i].throttled)
		}
	}
	return calls, throttled
}
