// Package upstreamccm builds and runs the upstream cloud-controller-manager
// (bench/upstream-ccm) against the test package's API server, for the tests
// that put Outrigger beside or after it.
package upstreamccm

import (
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CCM is the upstream cloud-controller-manager (bench/upstream-ccm:
// k8s.io/cloud-provider's own command and controllers with the sim
// provider), run as its own process against the package's API server.
type CCM struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan error
	once sync.Once
}

var (
	upstreamOnce sync.Once
	upstreamBin  string
	upstreamErr  error
)

// Build builds the upstream CCM from its module, once per test
// binary, and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	upstreamOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		// In the run's directory, not a test's: every test of the binary
		// shares it.
		upstreamBin = filepath.Join(testenv.RunDir(), "upstream-ccm")
		cmd := exec.Command("go", "build", "-o", upstreamBin, ".")
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..", "..", "bench", "upstream-ccm")
		if out, err := cmd.CombinedOutput(); err != nil {
			upstreamErr = err
			t.Logf("building the upstream CCM:\n%s", out)
		}
	})
	if upstreamErr != nil {
		t.Fatalf("building the upstream CCM: %v", upstreamErr)
	}
	return upstreamBin
}

// Start runs the upstream CCM with the sim provider on cloud
// until the test ends (or Stop), without leader election or serving; flags
// are added after those. Its log is printed when the test fails.
func Start(t testing.TB, bin string, cloud *testenv.Cloud, flags ...string) *CCM {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), "upstream-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--cloud-provider=sim", "--cloud-config=" + cloud.ConfigFile, "--kubeconfig=" + testenv.Kubeconfig,
		"--leader-elect=false", "--secure-port=0"}, flags...)
	u := &CCM{cmd: exec.Command(bin, args...), log: log, done: make(chan error, 1)}
	u.cmd.Stdout, u.cmd.Stderr = log, log
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { u.done <- u.cmd.Wait() }()
	t.Cleanup(func() {
		u.Stop(t)
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("upstream CCM log (last 3000 bytes):\n%s", b)
			}
		}
	})
	return u
}

// Stop interrupts the upstream CCM and waits for it to exit (killed after
// 30 s); later calls do nothing.
func (u *CCM) Stop(t testing.TB) {
	u.once.Do(func() {
		_ = u.cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-u.done:
			t.Logf("the upstream CCM exited: %v", err)
		case <-time.After(30 * time.Second):
			_ = u.cmd.Process.Kill()
			t.Logf("the upstream CCM was killed: %v", <-u.done)
		}
		u.log.Close()
	})
}
