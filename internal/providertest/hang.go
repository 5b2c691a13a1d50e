package providertest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Hang is a provider stuck on some objects, for the tests that prove a
// hung call costs only its own object: Wait blocks the calls about the
// objects it selects, ignoring their context as a provider stuck on a
// dead socket does, until Release or the end of the test. A double calls
// Wait first in each of its methods that should hang.
type Hang struct {
	selects func(name string) bool
	release chan struct{}
	once    sync.Once
	calls   atomic.Int64
}

// NewHang returns a Hang on the objects selects names, released when the
// test ends (so no goroutine outlives it).
func NewHang(t testing.TB, selects func(name string) bool) *Hang {
	h := &Hang{selects: selects, release: make(chan struct{})}
	t.Cleanup(h.Release)
	return h
}

// Prefix selects the objects whose name begins with p.
func Prefix(p string) func(string) bool {
	return func(name string) bool { return strings.HasPrefix(name, p) }
}

// Wait blocks until Release when the object is selected, and says whether
// it was: the double then answers as a cloud that never did (an error,
// a not-found).
func (h *Hang) Wait(name string) bool {
	if !h.selects(name) {
		return false
	}
	h.calls.Add(1)
	<-h.release
	return true
}

// Release lets every call waiting, and every later one, return.
func (h *Hang) Release() { h.once.Do(func() { close(h.release) }) }

// Calls is how many calls about selected objects reached Wait, those
// waiting and those returned.
func (h *Hang) Calls() int64 { return h.calls.Load() }
