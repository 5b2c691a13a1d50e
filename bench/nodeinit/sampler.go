package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
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

// print writes, for every sample from start on until the last node was
// initialized, the time since start, the cloud calls and the nodes
// initialized so far (initialized holds the times, in order).
func (s *sampler) print(w io.Writer, start time.Time, initialized []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(initialized) == 0 {
		return
	}
	end := initialized[len(initialized)-1]
	var base int64 = -1
	done := 0
	fmt.Fprintln(w, "seconds\tcloud calls\tthrottled\tinitialized")
	for _, x := range s.samples {
		if x.at.Before(start) {
			continue
		}
		if base < 0 {
			base = x.total
		}
		for done < len(initialized) && !initialized[done].After(x.at) {
			done++
		}
		fmt.Fprintf(w, "%.1f\t%d\t%d\t%d\n", x.at.Sub(start).Seconds(), x.total-base, x.throttled, done)
		if x.at.After(end) {
			return
		}
	}
}

// printPerSecond writes the cloud calls in each whole second from from
// to to (each second's count read from the last sample at or before its
// end), to see how a period's calls are spread.
func (s *sampler) printPerSecond(w io.Writer, from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintln(w, "idle second\tcloud calls")
	var prev *sample
	second := 1
	for i := range s.samples {
		x := &s.samples[i]
		if x.at.Before(from) {
			continue
		}
		if prev == nil {
			prev = x
			continue
		}
		end := from.Add(time.Duration(second) * time.Second)
		if end.After(to) {
			return
		}
		if x.at.After(end) {
			// The previous sample is the last at or before this second's end.
			before := &s.samples[i-1]
			fmt.Fprintf(w, "%d\t%d\n", second-1, before.total-prev.total)
			prev = before
			second++
		}
	}
}
