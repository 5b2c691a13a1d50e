package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The plugin-restart fault (Config.Plugin): Outrigger's replicas reach the
// sim cloud through the sim provider served as an out-of-process plugin
// (one per replica, as a sidecar would be), and the fault SIGKILLs every
// plugin while a cloud call is in flight, then starts them again after the
// hold. To catch calls in flight, the cloud answers slowly
// (pluginCallLatency) from the fault's start until the plugins are killed,
// and Services are created so that calls are made.
const (
	pluginCallLatency = 2 * time.Second
	// pluginInFlightWait bounds the wait for a call to be in flight before
	// the kill: past it the plugins are killed all the same.
	pluginInFlightWait = 15 * time.Second
	pluginServices     = 2
	// pluginStartWait bounds the wait for a started plugin's socket.
	pluginStartWait = 30 * time.Second
)

// plugin is the out-of-process provider of one of Outrigger's replicas.
type plugin struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// pluginSocket is replica slot i's plugin socket, in a private directory.
func (h *harness) pluginSocket(i int) string {
	return filepath.Join(h.dir, fmt.Sprintf("plugin-%d", i), "p.sock")
}

// pluginCloudConfig is the grpc provider's cloud-config for replica slot
// i, written once.
func (h *harness) pluginCloudConfig(i int) (string, error) {
	path := filepath.Join(h.dir, fmt.Sprintf("grpc-%d.yaml", i))
	// A short reconnect cap: a restarted plugin is found within 2 s.
	cfg := "endpoint: unix://" + h.pluginSocket(i) + "\nreconnectMaxDelay: 2s\n"
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// startPlugin starts replica slot i's plugin and waits for its socket.
func (h *harness) startPlugin(ctx context.Context, i int) error {
	sock := h.pluginSocket(i)
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return err
	}
	// A SIGKILLed plugin leaves its socket file; the server refuses a path
	// someone holds, so the stale one goes first.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	simYAML, err := os.ReadFile(h.simYAML)
	if err != nil {
		return err
	}
	cloudConfig := filepath.Join(h.dir, fmt.Sprintf("plugin-%d.yaml", i))
	// The plugin's calls carry its name in the cloud's call log, as one of
	// Outrigger's (a shared run audits them as such).
	if err := os.WriteFile(cloudConfig, append(simYAML, fmt.Appendf(nil, "caller: %splugin-%d\n", callerPrefix, i)...), 0o600); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(h.dir, fmt.Sprintf("plugin-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(h.cfg.Plugin, "--endpoint", "unix://"+sock, "--cloud-config", cloudConfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting plugin %d: %w", i, err)
	}
	p := &plugin{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	h.mu.Lock()
	h.plugins[i] = p
	h.mu.Unlock()

	deadline := time.Now().Add(pluginStartWait)
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("plugin %d exited at start: %v (see %s)", i, cmd.ProcessState, log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plugin %d: its socket did not accept connections within %v: %w", i, pluginStartWait, err)
		}
	}
}

// stopPlugin signals replica slot i's plugin and waits for it to exit.
func (h *harness) stopPlugin(i int, sig syscall.Signal) {
	h.mu.Lock()
	p := h.plugins[i]
	h.plugins[i] = nil
	h.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// injectPluginRestart starts the plugin-restart fault and returns what
// lifts it: the plugins started again.
func (h *harness) injectPluginRestart(ctx context.Context, s Step) (func(context.Context) error, error) {
	h.cloud.SetSettings(simcloud.Settings{Latency: simcloud.Duration{Duration: pluginCallLatency}})
	before := h.cloud.Calls().Total
	for i := range pluginServices {
		if err := h.createService(ctx, s.Pick+uint32(i)*2654435761); err != nil {
			h.logf("  Service: %v", err)
		}
	}
	inFlight := false
	for deadline := time.Now().Add(pluginInFlightWait); time.Now().Before(deadline); {
		// The cloud counts a call when it arrives, before the latency:
		// a new count is a call still being answered.
		if h.cloud.Calls().Total > before {
			inFlight = true
			break
		}
		select {
		case <-ctx.Done():
			deadline = time.Now()
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range h.cfg.Replicas {
		h.stopPlugin(i, syscall.SIGKILL)
	}
	h.cloud.SetSettings(simcloud.Settings{})
	h.report.pluginKill(inFlight)
	h.logf("  plugins killed (a call in flight: %v)", inFlight)
	return func(ctx context.Context) error {
		for i := range h.cfg.Replicas {
			if err := h.startPlugin(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
