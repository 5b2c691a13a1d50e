package dataplane

import (
	"context"
	"net"
	"time"
)

// ListenTCP listens for a port's connections without TCP keep-alive
// probes, which net.Listen turns on for every accepted connection (four
// system calls each, about 7 % of the data plane's CPU when each request
// comes on a new connection). An HTTP connection needs none: the idle,
// header and stream idle timeouts end one whose client went away, as
// nginx and HAProxy leave them off by default. A TCP or TLS passthrough
// connection, idle for up to an hour by design, gets them once its route
// is chosen (keepAlive).
func ListenTCP(address string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", address)
}

// keepAlive turns on the probes net.Listen would have: a passthrough
// client that vanished without a FIN is found in minutes rather than at
// the TCP idle timeout.
func keepAlive(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9})
	}
}
