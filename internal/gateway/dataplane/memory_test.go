package dataplane

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGCLeavesAnOperatorsGOGC(t *testing.T) {
	before := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(before) })

	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	if got := TuneGC(); got != 150 || debug.SetGCPercent(150) != 150 {
		t.Errorf("GOGC=150 set: TuneGC made it %d", got)
	}

	os.Unsetenv("GOGC") // t.Setenv restores it
	if got := TuneGC(); got != gcPercent || debug.SetGCPercent(gcPercent) != gcPercent {
		t.Errorf("GOGC unset: TuneGC made it %d, want %d", got, gcPercent)
	}
}

func TestCopyBuffersAllocateNothingOnceWarm(t *testing.T) {
	b := copyBuffers.Get()
	if len(b) != copyBufferSize {
		t.Fatalf("buffer of %d bytes, want %d", len(b), copyBufferSize)
	}
	copyBuffers.Put(b)
	// A buffer of another size (not one of ours) is not kept.
	copyBuffers.Put(make([]byte, 16))
	if got := len(copyBuffers.Get()); got != copyBufferSize {
		t.Fatalf("after a foreign Put, Get gave %d bytes", got)
	}
	if n := testing.AllocsPerRun(1000, func() { copyBuffers.Put(copyBuffers.Get()) }); n > 0.01 {
		t.Errorf("Get and Put allocate %.2f times", n)
	}
}
