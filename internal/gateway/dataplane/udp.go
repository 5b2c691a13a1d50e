package dataplane

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// udpRelay serves a UDP port: each client address is a flow with its own
// connected socket to one backend, kept while packets pass either way. A
// flood of client addresses (spoofed or not) costs at most MaxUDPFlows
// flows, and a flow costs a goroutine and a socket but no buffer while it
// waits: the quietest flow makes room for a new one.
type udpRelay struct {
	conn net.PacketConn
	s    *served
	p    *Proxy

	mu     sync.Mutex
	flows  map[string]*udpFlow
	closed bool
}

type udpFlow struct {
	up   net.Conn
	last atomic.Int64
}

// udpBuffers are the 64 KiB buffers (the largest datagram) the relay reads
// into, taken only while a datagram is being read.
var udpBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (u *udpRelay) serve() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := u.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f := u.flow(from)
		if f == nil {
			continue
		}
		f.last.Store(time.Now().UnixNano())
		_, _ = f.up.Write(buf[:n])
	}
}

// flow returns the client's flow, opening one to a backend for a new
// client; the backend is dialled outside the relay's lock, so a slow dial
// holds up only that client.
func (u *udpRelay) flow(from net.Addr) *udpFlow {
	key := from.String()
	u.mu.Lock()
	if f, ok := u.flows[key]; ok || u.closed {
		u.mu.Unlock()
		return f
	}
	u.mu.Unlock()

	b, ok := pickBackend(*u.s.backends.Load())
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := u.p.opts.Dial(ctx, "udp", b.Address)
	cancel()
	if err != nil {
		u.p.opts.Log.V(2).Info("Backend unreachable", "address", b.Address, "err", err)
		return nil
	}
	f := &udpFlow{up: up}
	f.last.Store(time.Now().UnixNano())

	u.mu.Lock()
	if other, ok := u.flows[key]; ok || u.closed {
		u.mu.Unlock()
		up.Close()
		return other
	}
	var quietest *udpFlow
	if len(u.flows) >= u.p.opts.Limits.MaxUDPFlows {
		var qk string
		for k, c := range u.flows {
			if quietest == nil || c.last.Load() < quietest.last.Load() {
				quietest, qk = c, k
			}
		}
		delete(u.flows, qk)
	}
	u.flows[key] = f
	u.mu.Unlock()
	if quietest != nil {
		quietest.up.Close() // its relayReplies ends
	}
	go u.relayReplies(from, f)
	return f
}

// relayReplies copies the backend's answers to the client until the flow
// has been idle for UDPIdle or is closed.
func (u *udpRelay) relayReplies(to net.Addr, f *udpFlow) {
	key := to.String()
	defer func() {
		u.mu.Lock()
		if u.flows[key] == f {
			delete(u.flows, key)
		}
		u.mu.Unlock()
		f.up.Close()
	}()
	for {
		_ = f.up.SetReadDeadline(time.Now().Add(u.p.opts.UDPIdle))
		err := readDatagram(f.up, func(p []byte) error {
			f.last.Store(time.Now().UnixNano())
			_, err := u.conn.WriteTo(p, to)
			return err
		})
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, f.last.Load())) < u.p.opts.UDPIdle {
				continue
			}
			return
		}
	}
}

// readDatagram waits for one datagram on c and hands it to deliver. On a
// socket it waits for readability first and takes a buffer from the pool
// only to read, so thousands of waiting flows hold no buffers.
func readDatagram(c net.Conn, deliver func([]byte) error) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		bp := udpBuffers.Get().(*[]byte)
		defer udpBuffers.Put(bp)
		n, err := c.Read(*bp)
		if err != nil {
			return err
		}
		return deliver((*bp)[:n])
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var derr error
	rerr := rc.Read(func(fd uintptr) bool {
		bp := udpBuffers.Get().(*[]byte)
		defer udpBuffers.Put(bp)
		n, _, err := syscall.Recvfrom(int(fd), *bp, syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK {
			return false // not readable yet: wait, holding no buffer
		}
		if err != nil {
			derr = err
			return true
		}
		derr = deliver((*bp)[:n])
		return true
	})
	if rerr != nil {
		return rerr
	}
	return derr
}

func (u *udpRelay) close() {
	u.conn.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for _, f := range u.flows {
		f.up.Close()
	}
}
