package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The chaos harness kills the API server and pauses etcd for real. envtest
// keeps their processes to itself, so they are found as this process's
// children running the binary of that name, and an API server killed here is
// restarted here with the very command line envtest gave it: same port, same
// certificates and client CA, so every kubeconfig written before still works.

// KillAPIServer SIGKILLs the API server, as an OOM kill or a node failure
// would, and returns once it is gone.
func (cp *ControlPlane) KillAPIServer() error {
	cp.faultsMu.Lock()
	defer cp.faultsMu.Unlock()
	if cp.apiServer != nil {
		if err := cp.apiServer.Process.Signal(syscall.SIGKILL); err != nil {
			return fmt.Errorf("killing kube-apiserver: %w", err)
		}
		<-cp.apiServerDone
		cp.apiServer = nil
		return nil
	}
	pid, err := childPID("kube-apiserver")
	if err != nil {
		return err
	}
	if cp.apiServerArgs == nil {
		if cp.apiServerArgs, err = cmdline(pid); err != nil {
			return err
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver (pid %d): %w", pid, err)
	}
	// envtest's own goroutine reaps it; wait until the pid is gone.
	return wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return syscall.Kill(pid, 0) != nil, nil
	})
}

// StartAPIServer starts the API server KillAPIServer killed, with the same
// command line, and returns once it answers /readyz.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.faultsMu.Lock()
	defer cp.faultsMu.Unlock()
	if cp.apiServerArgs == nil {
		return errors.New("kube-apiserver was not killed through KillAPIServer: nothing to restart")
	}
	if cp.apiServer == nil {
		cmd := exec.Command(cp.apiServerArgs[0], cp.apiServerArgs[1:]...)
		// Its own process group, as envtest starts it, so a terminal's
		// Ctrl-C reaches the harness first and it stops the API server.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("restarting kube-apiserver: %w", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		cp.apiServer, cp.apiServerDone = cmd, done
	}
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cp.Config))
	if err != nil {
		return err
	}
	done := cp.apiServerDone
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-done:
			return false, errors.New("restarted kube-apiserver exited")
		default:
		}
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		return err == nil, nil
	})
}

// PauseEtcd stops etcd (SIGSTOP): it holds its connections but answers
// nothing, as a disk stall or a long GC pause would. It returns once the
// kernel reports etcd stopped.
func (cp *ControlPlane) PauseEtcd() error {
	if err := signalChild("etcd", syscall.SIGSTOP); err != nil {
		return err
	}
	pid, err := childPID("etcd")
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return processState(pid) == "T", nil
	})
}

// processState is the state letter of /proc/pid/stat (R, S, T...).
func processState(pid int) string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	if f := strings.Fields(s[i+1:]); len(f) > 0 {
		return f[0]
	}
	return ""
}

// ResumeEtcd continues a paused etcd (SIGCONT).
func (cp *ControlPlane) ResumeEtcd() error { return signalChild("etcd", syscall.SIGCONT) }

// stopRestarted stops an API server StartAPIServer started; envtest's Stop
// only knows the first one.
func (cp *ControlPlane) stopRestarted() error {
	cp.faultsMu.Lock()
	defer cp.faultsMu.Unlock()
	if cp.apiServer == nil {
		return nil
	}
	_ = cp.apiServer.Process.Signal(syscall.SIGTERM)
	select {
	case <-cp.apiServerDone:
	case <-time.After(30 * time.Second):
		_ = cp.apiServer.Process.Kill()
		<-cp.apiServerDone
	}
	cp.apiServer = nil
	return nil
}

func signalChild(name string, sig syscall.Signal) error {
	pid, err := childPID(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signalling %s (pid %d) with %v: %w", name, pid, sig, err)
	}
	return nil
}

// childPID finds the child of this process running the assets' binary name.
func childPID(name string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("finding %s: %w", name, err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after
		// the last parenthesis.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid != self {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && filepath.Base(exe) == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process is a child of this one (pid %d)", name, self)
}

func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("reading kube-apiserver's command line: %w", err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// resumeEtcdIfRunning continues etcd in case it was left paused; no etcd
// child is not an error.
func resumeEtcdIfRunning() error {
	pid, err := childPID("etcd")
	if err != nil {
		return nil
	}
	return syscall.Kill(pid, syscall.SIGCONT)
}
