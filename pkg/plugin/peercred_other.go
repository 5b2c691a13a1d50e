//go:build !linux

package plugin

import (
	"errors"
	"net"
)

// peerUID is supported on Linux only; elsewhere unix-socket peers cannot be
// checked and are refused.
func peerUID(net.Conn) (int, error) {
	return 0, errors.New("checking a unix socket peer's uid is supported on Linux only")
}
