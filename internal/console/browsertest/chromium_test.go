package browsertest

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	chromiumOnce sync.Once
	chromium     string
	chromiumWhy  string
)

// chromiumPath finds Chromium, installing Debian's package when it is
// missing and the test runs as root with apt-get (as the cluster harness
// installs containerd); the test is skipped, saying why, only when that
// cannot be done.
func chromiumPath(t *testing.T) string {
	t.Helper()
	chromiumOnce.Do(func() { chromium, chromiumWhy = findOrInstallChromium() })
	if chromium == "" {
		t.Skipf("skipping the browser test: %s", chromiumWhy)
	}
	return chromium
}

func lookChromium() string {
	if p := os.Getenv("OUTRIGGER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func findOrInstallChromium() (string, string) {
	if p := lookChromium(); p != "" {
		return p, ""
	}
	if os.Getuid() != 0 {
		return "", "no Chromium found (set OUTRIGGER_CHROMIUM, or install it: sudo apt-get install chromium); not root, so the test cannot install it"
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", "no Chromium found and no apt-get to install it with: install Chromium and set OUTRIGGER_CHROMIUM"
	}
	// Another apt-get may hold the dpkg lock for a while: retry, for a
	// bounded time.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	install := func() (string, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	var last string
	for attempt := 0; ctx.Err() == nil; attempt++ {
		out, err := install()
		if err == nil {
			if p := lookChromium(); p != "" {
				return p, ""
			}
			return "", "apt-get installed chromium but no chromium binary is on PATH"
		}
		last = out
		switch {
		case strings.Contains(out, "Could not get lock") || strings.Contains(out, "Unable to acquire the dpkg"):
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		case attempt == 0 && strings.Contains(out, "Unable to locate package"):
			// A fresh image has no package lists yet.
			_ = exec.CommandContext(ctx, "apt-get", "update", "-q").Run()
		default:
			return "", "installing chromium with apt-get failed: " + tail(out)
		}
	}
	return "", "installing chromium with apt-get timed out (dpkg lock held): " + tail(last)
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return s
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
