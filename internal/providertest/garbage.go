package providertest

import (
	"net"
	"os"
	"testing"
)

// GarbageSocket serves the unix socket at path with bytes that are not
// HTTP/2, standing for something other than a plugin on a plugin's socket,
// until stop (or the test's end). stop removes the socket.
func GarbageSocket(t testing.TB, path string) (stop func()) {
	t.Helper()
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.0 418 I'm a teapot\r\n\r\n\x00\xff\xfe garbage \x01\x02"))
			conn.Close()
		}
	}()
	stop = func() { ln.Close(); <-done; _ = os.Remove(path) }
	t.Cleanup(func() { ln.Close() })
	return stop
}
