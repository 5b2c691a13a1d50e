// Package freeport finds loopback TCP ports for tests. It imports nothing of
// Outrigger's, so any package's tests may use it (testenv imports the
// providers).
package freeport

import (
	"net"
	"testing"
)

// Get returns a loopback TCP port that was free a moment ago.
func Get(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
