package cloud

import (
	"sync"
	"testing"
)

// Calls one after the other reuse one goroutine; a call that hangs keeps
// its goroutine and the next call gets another at once.
func TestWorkersReuseAndNeverWait(t *testing.T) {
	w := newWorkers()
	for range 100 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
	}
	// The first call starts a goroutine; the next ones find it idle,
	// unless they come before it is back (it reaches its wait right
	// after the call's last line).
	if got := w.started.Load(); got >= 50 {
		t.Errorf("%d goroutines started for 100 calls in a row, want them reused", got)
	}
	hang := make(chan struct{})
	defer close(hang)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		w.run(func() { wg.Done(); <-hang })
	}
	wg.Wait() // three hung calls run at once: none waited for another
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
}
