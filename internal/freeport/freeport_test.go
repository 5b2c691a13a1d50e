package freeport

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A reserved port is the child's to bind with SO_REUSEPORT, and no one
// else's; connections reach the child.
func TestReserve(t *testing.T) {
	port := Reserve(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatal("a listener without SO_REUSEPORT took a reserved port")
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("the child could not bind its reserved port: %v", err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

// Ports come from below the ephemeral range, each handed out once.
func TestGet(t *testing.T) {
	low, high := usablePorts()
	seen := map[int]bool{}
	for range 50 {
		p := Get(t)
		if p < low || p >= high || seen[p] {
			t.Fatalf("port %d: outside %d-%d or handed out twice", p, low, high)
		}
		seen[p] = true
	}
	if claim(Reserve(t)) {
		t.Fatal("a reserved port was claimed again")
	}
}
