package dataplane

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Removing a route, a backend or the ReferenceGrant that allowed it revokes
// access (Gateway API: removal MUST revoke), also for what is already
// flowing: WebSockets, gRPC streams and TCP connections that outlive the
// programming they started under are ended when it changes without them.
// An HTTP request is ended revokeGrace after the change, not at once: a
// route moved to another backend under load costs no ordinary request (it
// finishes within the grace), while a stream or WebSocket still ends.

// errRevoked ends a request whose route or backend the programming no
// longer allows: not a timeout, so it is answered 503 if nothing was yet.
var errRevoked = errors.New("route or backend no longer allowed")

// revokeGrace is how long a request in flight goes on once the
// programming no longer allows its route and backend.
const revokeGrace = 5 * time.Second

// flight is a request in flight: the route that took it and the backend it
// went to.
type flight struct {
	route, backend string
	// cancel ends the request's context.
	cancel context.CancelCauseFunc
	// revoking ends the request once the grace is over; nil while the
	// programming allows it.
	revoking *time.Timer
}

// flights are a port's requests in flight.
type flights struct {
	mu  sync.Mutex
	set map[*flight]struct{}
}

func (f *flights) add(fl *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set = map[*flight]struct{}{}
	}
	f.set[fl] = struct{}{}
}

func (f *flights) done(fl *flight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl.revoking != nil {
		fl.revoking.Stop()
	}
	delete(f.set, fl)
}

// revoke ends, once the grace is over, every request in flight the router
// no longer allows; one it allows again before then goes on.
func (f *flights) revoke(r *router, grace time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fl := range f.set {
		allowed := r != nil && r.allows(fl.route, fl.backend)
		switch {
		case !allowed && fl.revoking == nil:
			fl.revoking = time.AfterFunc(grace, func() { fl.cancel(errRevoked) })
		case allowed && fl.revoking != nil:
			fl.revoking.Stop()
			fl.revoking = nil
		}
	}
}

// allowKey is a route and one of its valid backends.
type allowKey struct{ route, backend string }

func (r *router) allows(route, backend string) bool {
	_, ok := r.allowed[allowKey{route, backend}]
	return ok
}

// keepTCP are the keys of a TCP port's connections its backends allow:
// their addresses.
func keepTCP(backends []Backend) map[string]bool {
	keep := map[string]bool{}
	for _, b := range backends {
		if !b.Invalid && b.Weight > 0 {
			keep[b.Address] = true
		}
	}
	return keep
}

// revoke closes the connections spliced under a key (a TCP port's
// backend, a TLS port's route and backend) no longer in keep.
func (t *tcpForwarder) revoke(keep map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, key := range t.conns {
		if key != "" && !keep[key] {
			c.Close()
		}
	}
}

// trackUpstream records the key a client connection was spliced under.
func (t *tcpForwarder) trackUpstream(c net.Conn, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.conns[c]; ok {
		t.conns[c] = key
	}
}
