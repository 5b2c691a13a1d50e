package dataplane

import (
	"net"
	"syscall"
	"testing"
)

// An HTTP port's connections come without TCP keep-alive probes; a
// passthrough connection gets them once routed.
func TestKeepAliveProbesOnlyWhereAsked(t *testing.T) {
	l, err := ListenTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	probes := func() int {
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var on int
		var serr error
		if err := raw.Control(func(fd uintptr) { on, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil || serr != nil {
			t.Fatal(err, serr)
		}
		return on
	}
	if probes() != 0 {
		t.Error("an accepted connection has keep-alive probes, want none")
	}
	keepAlive(c)
	if probes() != 1 {
		t.Error("keepAlive left the connection without probes")
	}
}
