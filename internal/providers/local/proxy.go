package local

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// listener serves one port of the VIP.
type listener struct {
	close func()
}

func (b *balancer) listen(k listenerKey) (*listener, error) {
	addr := netip.AddrPortFrom(b.vip, uint16(k.port)).String()
	switch k.protocol {
	case corev1.ProtocolTCP:
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on TCP %s: %w", addr, err)
		}
		t := &tcpProxy{b: b, key: k, ln: ln, conns: map[net.Conn]struct{}{}}
		go t.serve()
		return &listener{close: t.close}, nil
	default:
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on UDP %s: %w", addr, err)
		}
		u := &udpProxy{b: b, key: k, conn: pc.(*net.UDPConn), flows: map[netip.AddrPort]*udpFlow{}}
		go u.serve()
		return &listener{close: u.close}, nil
	}
}

// tcpProxy accepts on the VIP and splices each connection to a backend.
type tcpProxy struct {
	b   *balancer
	key listenerKey
	ln  net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (t *tcpProxy) serve() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go t.handle(c)
	}
}

func (t *tcpProxy) track(c net.Conn, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if add {
		if t.closed {
			return false
		}
		t.conns[c] = struct{}{}
	} else {
		delete(t.conns, c)
	}
	return true
}

func (t *tcpProxy) handle(c net.Conn) {
	defer c.Close()
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	if !t.b.allowed(client) {
		return // outside loadBalancerSourceRanges: refused
	}
	nodePort, ok := t.b.nodePort(t.key)
	if !ok {
		return
	}
	upstream := t.dial(client, nodePort)
	if upstream == nil {
		return
	}
	defer upstream.Close()
	if t.b.sendsProxyProtocol() {
		// Before any byte of the client's: the backend reads who the
		// client is first.
		hdr := proxyV2Header(c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort())
		if _, err := upstream.Write(hdr); err != nil {
			return
		}
	}
	if !t.track(c, true) {
		return
	}
	defer t.track(c, false)
	done := make(chan struct{}, 2)
	splice := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go splice(upstream, c)
	go splice(c, upstream)
	<-done
	<-done
}

// dial connects a new client to a backend: up to three backends in turn,
// and while none accepts (a Service just provisioned: its nodes' ports open
// a moment after its address is published), again with backoff for up to
// connectWait, the client held meanwhile rather than reset. Nil: none
// accepted in time.
func (t *tcpProxy) dial(client netip.Addr, nodePort int32) net.Conn {
	deadline := time.Now().Add(t.b.s.connectWait)
	wait := 50 * time.Millisecond
	for {
		var tried []backend
		for range 3 {
			be, ok := t.b.pick(client, tried)
			if !ok {
				break
			}
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(be.ip, uint16(nodePort)).String(), t.b.s.dialTimeout)
			if err == nil {
				return c
			}
			t.b.dialFailures.Add(1)
			tried = append(tried, be)
		}
		if time.Now().Add(wait).After(deadline) {
			return nil
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

func (t *tcpProxy) close() {
	_ = t.ln.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		_ = c.Close()
	}
}

// udpProxy relays datagrams: each client address is a flow with its own
// socket to the backend it was given, ended after the idle timeout.
type udpProxy struct {
	b    *balancer
	key  listenerKey
	conn *net.UDPConn

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

type udpFlow struct {
	upstream *net.UDPConn
	last     atomic.Int64 // unix nanos of the last packet either way
}

func (u *udpProxy) serve() {
	buf := make([]byte, 64*1024)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !u.b.allowed(client.Addr()) {
			continue
		}
		f := u.flow(client)
		if f == nil {
			continue
		}
		f.last.Store(time.Now().UnixNano())
		_, _ = f.upstream.Write(buf[:n])
	}
}

func (u *udpProxy) flow(client netip.AddrPort) *udpFlow {
	u.mu.Lock()
	defer u.mu.Unlock()
	if f, ok := u.flows[client]; ok {
		return f
	}
	if len(u.flows) >= maxUDPFlows {
		return nil
	}
	nodePort, ok := u.b.nodePort(u.key)
	if !ok {
		return nil
	}
	be, ok := u.b.pick(client.Addr(), nil)
	if !ok {
		return nil
	}
	up, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(be.ip, uint16(nodePort))))
	if err != nil {
		return nil
	}
	f := &udpFlow{upstream: up}
	f.last.Store(time.Now().UnixNano())
	u.flows[client] = f
	go u.relayReplies(client, f)
	return f
}

func (u *udpProxy) relayReplies(client netip.AddrPort, f *udpFlow) {
	defer func() {
		u.mu.Lock()
		delete(u.flows, client)
		u.mu.Unlock()
		_ = f.upstream.Close()
	}()
	buf := make([]byte, 64*1024)
	for {
		_ = f.upstream.SetReadDeadline(time.Now().Add(u.b.s.udpIdle))
		n, err := f.upstream.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, f.last.Load())) < u.b.s.udpIdle {
				continue
			}
			return
		}
		f.last.Store(time.Now().UnixNano())
		if _, err := u.conn.WriteToUDPAddrPort(buf[:n], client); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

func (u *udpProxy) close() {
	_ = u.conn.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range u.flows {
		_ = f.upstream.Close()
	}
}
