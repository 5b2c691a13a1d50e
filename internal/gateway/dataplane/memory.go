package dataplane

import (
	"os"
	"runtime/debug"
	"sync"
)

// What a request costs the data plane is mostly allocation and the garbage
// collector's work on it (profiles in docs/performance.md), so buffers are
// reused and the collector runs less often than Go's default.

// copyBufferSize is the buffer a response body or a TCP stream is copied
// through: httputil.ReverseProxy's and io.Copy's default.
const copyBufferSize = 32 << 10

// copyBuffers lends copy buffers: without it, the reverse proxy would
// allocate and clear 32 KiB for every request.
var copyBuffers = bufferPool{pool: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}

// bufferPool is an httputil.BufferPool over a sync.Pool of arrays: a
// pointer to an array goes in and out of the pool without allocating, as a
// slice would not.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte { return p.pool.Get().(*[copyBufferSize]byte)[:] }

func (p *bufferPool) Put(b []byte) {
	if cap(b) < copyBufferSize {
		return
	}
	p.pool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
}

// gcPercent is the collector's target when GOGC is not set: a data plane's
// live heap is small (its programming and connections) and what it
// allocates is short-lived, so collecting at 5x the live heap rather than
// 2x cuts the collector's share of each request's CPU; the memory limit
// (GOMEMLIMIT, which the Deployment sets from the container's limit) still
// has the collector run as often as it must to stay under it.
const gcPercent = 400

// TuneGC sets the collector's target for a data plane process, unless the
// environment's GOGC already says what it wants. It returns the percent in
// force.
func TuneGC() int {
	if _, set := os.LookupEnv("GOGC"); set {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(gcPercent)
	return gcPercent
}
