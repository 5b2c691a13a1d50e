// Package freeport finds loopback TCP ports for tests. It imports nothing of
// Outrigger's, so any package's tests may use it (testenv imports the
// providers).
//
// A child that can be handed a listener, or that binds port 0 and reports
// the port it got, needs neither function here: prefer that. Reserve is for
// a child that binds a port it is told with SO_REUSEPORT (Outrigger's and
// kube-apiserver's --permit-port-sharing): race-free. Get is for the rest,
// and its callers should retry a start that failed on "address already in
// use".
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Get returns a loopback TCP port that was free a moment ago, for a child
// that binds it without SO_REUSEPORT. Between this check and the child's
// bind, another process may take the port; two things make that unlikely:
//   - the port is below the kernel's ephemeral range, which is where an
//     outgoing connection (any process's, binding a port of its own) or a
//     listener on port 0 takes its port from;
//   - a port is handed out once per machine while its test process runs: a
//     lock file per port, held until the process exits, keeps test packages
//     run in parallel from handing out the same one.
func Get(t testing.TB) int {
	t.Helper()
	low, high := usablePorts()
	start := low + rand.IntN(high-low)
	for i := range high - low {
		port := low + (start-low+i)%(high-low)
		if claim(port) {
			return port
		}
	}
	t.Fatalf("no free loopback port in %d-%d", low, high)
	return 0
}

// Reserve returns a loopback TCP port held, until the test ends, by a
// socket bound to it with SO_REUSEPORT that does not listen. Until then no
// process can bind the port but one that sets SO_REUSEPORT too (and runs as
// the same user), and no connection reaches the holder: hand the port to a
// child that listens with SO_REUSEPORT (--permit-port-sharing) and it is
// the child's, with no moment where another could take it.
func Reserve(t testing.TB) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	low, high := usablePorts()
	start := low + rand.IntN(high-low)
	for i := range high - low {
		port := low + (start-low+i)%(high-low)
		// Below the ephemeral range, for the reason Get says; and
		// claimed, so that Get never hands it out while it is held.
		if !claim(port) {
			continue
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err == nil {
			return port
		}
	}
	t.Fatalf("no loopback port to reserve in %d-%d", low, high)
	return 0
}

// usablePorts is the range ports are taken from: the 16384 ports below the
// kernel's ephemeral range (32768-60999 by default).
func usablePorts() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 2048 {
				high = n
			}
		}
	}
	return max(1024, high-16384), high
}

var (
	mu sync.Mutex
	// held keeps the lock files of the ports this process handed out
	// open, and so locked, until it exits.
	held []*os.File
)

// claim takes port for this process, if no other test process holds it
// and nothing listens on it now.
func claim(port int) bool {
	dir := filepath.Join(os.TempDir(), "outrigger-freeport")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false
	}
	// flock locks belong to the open file: a second claim of the port in
	// this process fails as one from another process does.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	// Any address: a child may bind the wildcard, and then a listener
	// on any loopback address would be in its way.
	for _, addr := range []string{"127.0.0.1", "0.0.0.0"} {
		l, err := net.Listen("tcp4", net.JoinHostPort(addr, strconv.Itoa(port)))
		if err != nil {
			f.Close()
			return false
		}
		l.Close()
	}
	mu.Lock()
	held = append(held, f)
	mu.Unlock()
	return true
}
