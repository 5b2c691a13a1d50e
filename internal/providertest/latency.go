package providertest

import (
	"context"
	"time"
)

// Latency is a cloud's round trip, for the doubles whose answers must take
// a moment so that calls overlap (the tests that callers take turns): a
// double calls Wait before it answers. A slow answer that the code under
// test times (a straggler, a slow first answer) is a Hang released once a
// test's fake clock has been stepped past it, not a Latency.
type Latency time.Duration

// Wait returns after the latency, or when ctx ends first with its error.
func (d Latency) Wait(ctx context.Context) error {
	t := time.NewTimer(time.Duration(d))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
