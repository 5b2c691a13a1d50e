package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"k8s.io/klog/v2"
)

// DefaultEndpoint is where a plugin serves, and the grpc provider dials,
// unless told otherwise: a socket in a directory only its owner may enter.
const DefaultEndpoint = "unix:///run/outrigger/plugin.sock"

// listenUnix serves on a unix socket at path that only processes of peerUID
// may use. The directory is created private (0700) when missing; a file at
// path that is not a socket, or a socket owned by another user, is never
// replaced (another user may have bound it first to answer in the plugin's
// place): the plugin refuses to start. Each accepted connection's peer is
// checked by the kernel's credentials; one of another uid is closed.
func listenUnix(path string, peerUID int) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating the socket's directory %s: %w", dir, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("refusing to serve on %s: a file that is not a socket is there", path)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("refusing to serve on %s: the socket there belongs to uid %d, not to this process (uid %d)", path, st.Uid, os.Geteuid())
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Only the owner may connect, unless another uid is allowed: then the
	// peer check below is the gate.
	mode := os.FileMode(0o600)
	if peerUID != os.Geteuid() {
		mode = 0o666
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("restricting socket %s: %w", path, err)
	}
	return &peerCheckedListener{Listener: ln, uid: peerUID}, nil
}

// peerCheckedListener accepts only connections from processes of uid.
type peerCheckedListener struct {
	net.Listener
	uid int
}

func (l *peerCheckedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && uid == l.uid {
			return c, nil
		}
		klog.Background().Info("Refused a connection to the plugin socket from another user", "allowedUID", l.uid, "peerUID", uid, "err", err)
		c.Close()
	}
}

// dialUnix connects to the plugin at path and checks that the process
// serving it runs as uid: a socket bound by someone else is not the plugin.
func dialUnix(ctx context.Context, path string, uid int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	got, err := peerUID(c)
	if err != nil || got != uid {
		c.Close()
		if err == nil {
			err = fmt.Errorf("the process serving %s runs as uid %d, not %d: not the plugin (set peerUID in the cloud-config if the plugin runs as another user)", path, got, uid)
		}
		return nil, err
	}
	return c, nil
}
