package cloud

import (
	"sync/atomic"
	"time"
)

// workerIdle is how long a call's goroutine waits for the next call
// before it exits.
const workerIdle = 30 * time.Second

// workers runs calls on goroutines kept between calls. A call's goroutine
// grows its stack through the provider's code; a fresh goroutine per call
// paid that growth on every call, a large part of a quiet cluster's CPU
// (one call per node per refresh period). A call that hangs keeps its
// goroutine, and the next call starts another: no call ever waits for a
// goroutine.
type workers struct {
	tasks chan func()
	// started counts goroutines started, for tests.
	started atomic.Int64
}

func newWorkers() *workers { return &workers{tasks: make(chan func())} }

// run runs f on an idle goroutine, or a new one.
func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		w.started.Add(1)
		go w.loop(f)
	}
}

func (w *workers) loop(f func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // nothing of the last call stays reachable while idle
		idle.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		}
	}
}
