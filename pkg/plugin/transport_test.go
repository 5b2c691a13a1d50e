package plugin_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// Over TCP a plugin needs mutual TLS: a server certificate alone lets
// anyone who reaches the port delete load balancers. --insecure says
// otherwise on purpose.
func TestTCPNeedsClientAuthentication(t *testing.T) {
	dir := t.TempDir()
	_, sc, sk, _, _ := pki(t, dir)
	cert, err := tls.LoadX509KeyPair(sc, sk)
	if err != nil {
		t.Fatal(err)
	}
	serverOnly := &tls.Config{Certificates: []tls.Certificate{cert}}
	if _, err := plugin.Listen("127.0.0.1:0", serverOnly); err == nil || !strings.Contains(err.Error(), "without client authentication") {
		t.Errorf("TLS without a client CA: err = %v, want a refusal", err)
	}
	ln, err := plugin.ListenWith("127.0.0.1:0", plugin.ListenOptions{TLS: serverOnly, Insecure: true})
	if err != nil {
		t.Fatalf("--insecure: %v", err)
	}
	ln.Close()
}

// The default socket lives in a private directory, and a socket is only the
// owner's.
func TestSocketIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "p.sock")
	ln, err := plugin.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %o, want %o", p, got, want)
		}
	}
	if plugin.DefaultEndpoint != "unix:///run/outrigger/plugin.sock" {
		t.Errorf("default endpoint %s", plugin.DefaultEndpoint)
	}
}

// A path someone else holds is never taken over: a file that is not a
// socket, or a socket of another user (who may have bound it first to
// answer in the plugin's place).
func TestHeldSocketPathIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.Listen("unix://"+file, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a plain file at the path: err = %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a socket to another user needs root")
	}
	theirs := filepath.Join(dir, "theirs.sock")
	l, err := net.Listen("unix", theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Lchown(theirs, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := plugin.Listen("unix://"+theirs, nil); err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
		t.Errorf("another user's socket at the path: err = %v", err)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("the other user's socket was removed: %v", err)
	}
}

// Both ends check who is at the other end of a unix socket, by the
// kernel's credentials.
func TestSocketPeersAreChecked(t *testing.T) {
	ctx := context.Background()
	me := os.Geteuid()
	other := me + 4242

	// A plugin that only serves another uid closes our connection.
	endpoint, _ := socket(t)
	only := other
	ln, err := plugin.ListenWith(endpoint, plugin.ListenOptions{PeerUID: &only})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = plugin.Serve(sctx, ln, &wrong{}, plugin.Info{}) }()
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	if _, err := plugin.Dial(dctx, plugin.Config{Endpoint: endpoint}); err == nil {
		t.Error("a plugin serving only another uid answered us")
	}

	// Outrigger refuses a plugin that runs as a user other than the one it
	// expects.
	endpoint, _ = socket(t)
	serve(t, endpoint, &wrong{})
	dctx2, dcancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel2()
	_, err = plugin.Dial(dctx2, plugin.Config{Endpoint: endpoint, PeerUID: &other})
	if err == nil {
		t.Fatal("a plugin of an unexpected uid was used")
	}
	if !strings.Contains(err.Error(), "not the plugin") {
		t.Errorf("refusing a plugin of another uid: the error does not say why: %v", err)
	}
	dctx3, dcancel3 := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel3()
	if _, err := plugin.Dial(dctx3, plugin.Config{Endpoint: endpoint}); err != nil {
		t.Errorf("the plugin of our own uid: %v", err)
	}
}
