package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/providers/local"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The local cloud's instances: the harness made the machines (the nodes),
// so it is the cloud that knows them. It serves their state to the local
// provider (cloud-config instances.url) from the harness namespace, and
// takes stop/start/delete on a unix socket only root reaches, as a cloud's
// console would.

// InstancesPort is the local cloud's instance API port on BridgeIP.
const InstancesPort = 9400

// Instance states, as the local provider reads them.
const (
	InstanceRunning = "running"
	InstanceStopped = "stopped"
	// A deleted instance is answered 404.
)

type instanceInfo struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

func (c *Cluster) controlSocket() string { return filepath.Join(c.opts.WorkDir, "instances.sock") }

// ControlSocket is where a running cluster takes instance actions (its
// work directory's instances.sock).
func ControlSocket(work string) string { return filepath.Join(filepath.Clean(work), "instances.sock") }

// startInstanceAPI serves GET /instances/NAME to the cluster (the harness
// namespace) and, on the control socket, POST /instances/NAME/{stop,start,delete}.
func (c *Cluster) startInstanceAPI(context.Context) error {
	ln, err := listenInNetns("/var/run/netns/"+harnessNS, "tcp", net.JoinHostPort(BridgeIP, fmt.Sprint(InstancesPort)))
	if err != nil {
		return fmt.Errorf("instance API: %w", err)
	}
	c.fwd = append(c.fwd, ln)
	go func() {
		_ = (&http.Server{Handler: c.instanceHandler(false), ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	}()
	_ = os.Remove(c.controlSocket())
	ctl, err := net.Listen("unix", c.controlSocket())
	if err != nil {
		return fmt.Errorf("instance control socket: %w", err)
	}
	if err := os.Chmod(c.controlSocket(), 0o600); err != nil {
		_ = ctl.Close()
		return err
	}
	c.fwd = append(c.fwd, ctl)
	go func() {
		_ = (&http.Server{Handler: c.instanceHandler(true), ReadHeaderTimeout: 10 * time.Second}).Serve(ctl)
	}()
	return nil
}

func (c *Cluster) instanceHandler(control bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /instances/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		c.mu.Lock()
		state, ok := c.instances[name]
		c.mu.Unlock()
		// A sim node's machine is the sim cloud's, not this cloud's.
		ok = ok && c.Platform(name) == PlatformLocal
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			// The typed answer: a bare 404 is not "gone" to the provider.
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"code": local.InstanceNotFoundCode, "message": "no instance " + name})
			return
		}
		_ = json.NewEncoder(w).Encode(instanceInfo{Name: name, State: state})
	})
	if control {
		mux.HandleFunc("POST /instances/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
			var err error
			switch name := r.PathValue("name"); r.PathValue("action") {
			case "stop":
				err = c.StopInstance(r.Context(), name)
			case "start":
				err = c.StartInstance(r.Context(), name)
			case "delete":
				err = c.DeleteInstance(r.Context(), name)
			default:
				http.Error(w, "actions: stop, start, delete", http.StatusNotFound)
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
			}
		})
	}
	return mux
}

// InstanceAction asks the cluster running over work to stop, start or
// delete a node's instance (the `cluster instance` command).
func InstanceAction(ctx context.Context, work, action, name string) error {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", ControlSocket(work))
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cluster/instances/"+name+"/"+action, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("is a cluster running? %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", action, name, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// StopInstance powers a node off: its kubelet and kube-proxy stop and its
// pods are killed (containerd, the machine's disk, stays). The instance
// reads as stopped, so the provider reports it shut down.
func (c *Cluster) StopInstance(ctx context.Context, name string) error {
	c.mu.Lock()
	state, ok := c.instances[name]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("no instance %s", name)
	}
	if state == InstanceRunning {
		if err := c.stopAgents(name); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.instances[name] = InstanceStopped
	c.mu.Unlock()
	if c.Platform(name) == PlatformSim {
		return c.setSimState(name, simcloud.StateStopped)
	}
	return nil
}

// DeleteInstance stops the instance and removes it from the cloud: the
// provider then reports it gone.
func (c *Cluster) DeleteInstance(ctx context.Context, name string) error {
	if err := c.StopInstance(ctx, name); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.instances, name)
	c.mu.Unlock()
	if c.Platform(name) == PlatformSim {
		return c.setSimState(name, simcloud.StateTerminated)
	}
	return nil
}

// StartInstance starts a stopped or deleted instance again (a deleted one
// comes back under the same name, as a re-created machine; a sim instance
// with a new ID): its kubelet registers the node again.
func (c *Cluster) StartInstance(ctx context.Context, name string) error {
	c.mu.Lock()
	state, known := c.instances[name]
	_, isNode := c.agents[name]
	c.mu.Unlock()
	if !isNode {
		return fmt.Errorf("no node %s", name)
	}
	if known && state == InstanceRunning {
		return nil
	}
	if n, _ := c.node(name); n.Platform == PlatformSim {
		if err := c.runSimInstance(n); err != nil {
			return err
		}
	}
	if err := c.startAgents(name); err != nil {
		return err
	}
	c.mu.Lock()
	c.instances[name] = InstanceRunning
	c.mu.Unlock()
	return nil
}

// agent is a node process the harness restarts with its instance.
type agent struct {
	name string
	args []string
	// providerID: started with --provider-id=<the machine's providerID>
	// (the kubelet).
	providerID bool
}

func (c *Cluster) startAgents(node string) error {
	c.mu.Lock()
	agents := c.agents[node]
	c.mu.Unlock()
	for _, a := range agents {
		args := a.args
		if a.providerID {
			args = append(slices.Clone(args), "--provider-id="+c.ProviderID(node))
		}
		if _, err := c.start(a.name, args...); err != nil {
			return err
		}
	}
	return nil
}

// stopAgents stops the node's kubelet and kube-proxy (SIGTERM, SIGKILL
// after 10s), forgets them (their exit is not a failure), and kills the
// node's pods.
func (c *Cluster) stopAgents(node string) error {
	names := map[string]bool{}
	c.mu.Lock()
	for _, a := range c.agents[node] {
		names[a.name] = true
	}
	var stopping, kept []*proc
	for _, p := range c.procs {
		if names[p.name] {
			stopping = append(stopping, p)
		} else {
			kept = append(kept, p)
		}
	}
	c.procs = kept
	c.mu.Unlock()
	for _, p := range stopping {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range stopping {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if c.state.CgroupBase == "" {
		return errors.New("no cgroup base")
	}
	_, err := killCgroupTree(filepath.Join(c.state.CgroupBase, node))
	return err
}
