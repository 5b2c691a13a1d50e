package admission

import (
	"context"
	"sync"
)

type backgroundKey struct{}

// Background marks the calls made with ctx as background work (see
// cloud.Background): sent only while no foreground call of their family
// waits.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// IsBackground tells whether ctx's calls are background work.
func IsBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}

type relistedKey struct{}

// Relisted marks the calls made with ctx as ones whose outcome their caller
// reads again from a later list (see cloud.Relisted).
func Relisted(ctx context.Context) context.Context {
	return context.WithValue(ctx, relistedKey{}, true)
}

// IsRelisted tells whether ctx's calls are relisted.
func IsRelisted(ctx context.Context) bool {
	b, _ := ctx.Value(relistedKey{}).(bool)
	return b
}

// precedence counts the foreground calls waiting for one family's limits,
// and lets background calls wait until there are none.
type precedence struct {
	mu      sync.Mutex
	waiting int
	// clear is closed while no foreground call waits.
	clear chan struct{}
}

func newPrecedence() *precedence {
	c := make(chan struct{})
	close(c)
	return &precedence{clear: c}
}

// enter records a foreground call starting to wait; leave, that it stopped.
func (p *precedence) enter() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == 0 {
		p.clear = make(chan struct{})
	}
	p.waiting++
}

func (p *precedence) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting--
	if p.waiting == 0 {
		close(p.clear)
	}
}

// yield waits, within ctx, until no foreground call waits.
func (p *precedence) yield(ctx context.Context) error {
	p.mu.Lock()
	c := p.clear
	p.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pending reports whether a foreground call waits.
func (p *precedence) pending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting > 0
}
