package plugin

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerUID is the uid of the process at the other end of a unix socket, as
// the kernel saw it connect (SO_PEERCRED): it cannot be forged by the peer.
func peerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		cred *unix.Ucred
		cerr error
	)
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	return int(cred.Uid), nil
}
