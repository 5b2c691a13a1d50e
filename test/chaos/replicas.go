// The Outrigger replicas the chaos run starts, stops and kills, and the
// arguments each is started with.

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

func (h *harness) startReplicas(ctx context.Context) error {
	if h.cfg.Plugin != "" {
		h.plugins = make([]*plugin, h.cfg.Replicas)
		h.pluginConfigs = make([]string, h.cfg.Replicas)
		for i := range h.cfg.Replicas {
			cfg, err := h.pluginCloudConfig(i)
			if err != nil {
				return err
			}
			h.pluginConfigs[i] = cfg
			if err := h.startPlugin(ctx, i); err != nil {
				return err
			}
		}
	}
	for i := range h.cfg.Replicas + h.cfg.SharedReplicas + h.cfg.SecondReplicas {
		h.replicas = append(h.replicas, nil)
		if err := h.startReplica(i); err != nil {
			return err
		}
	}
	second := ""
	if h.cfg.Shared {
		second = fmt.Sprintf(", %d replicas of a second CCM (class %s)", h.cfg.SharedReplicas, foreignClass)
	}
	if sc := h.second; sc != nil {
		second += fmt.Sprintf(", a second cluster (cluster-id %s, the first's %s): %d nodes, %d Services, %d Outrigger replicas", sc.id, h.id, sc.nodes, sc.services0, h.cfg.SecondReplicas)
	}
	h.logf("environment up: %d nodes, %d Services, %d Outrigger replicas%s (%s)", h.cfg.Nodes, h.cfg.Services, h.cfg.Replicas, second, h.dir)
	return nil
}

// shared tells whether replica slot i is the second CCM's.
func (h *harness) shared(i int) bool {
	return i >= h.cfg.Replicas && i < h.cfg.Replicas+h.cfg.SharedReplicas
}

// secondSlot tells whether replica slot i is the second cluster's.
func (h *harness) secondSlot(i int) bool { return i >= h.cfg.Replicas+h.cfg.SharedReplicas }

// startControlPlane starts a cluster's etcd and kube-apiserver, writes its
// admin kubeconfig to kubecfg and returns a client of it and the cluster's
// ID (the kube-system namespace's UID, which Outrigger records in the
// cloud). It stops what it started on failure.

// replicaArgs run Outrigger with every controller, IPAM and routes on, and
// the configured leader election: outside failover runs, short enough that
// a killed leader is replaced within seconds. The second CCM's replicas
// (slot i, Config.Shared) run only the service controller, for its class,
// with their own Lease. The second cluster's (Config.SecondCluster) run
// every controller against their own API server, with a cluster CIDR of
// their own; both clusters keep the default --cluster-name.
func (h *harness) replicaArgs(i int, cloudConfig string) []string {
	provider := "sim"
	if h.cfg.Plugin != "" && !h.shared(i) && !h.secondSlot(i) {
		provider = "grpc"
		cloudConfig = h.pluginConfigs[i]
	}
	kubecfg := h.replicaKubecfg
	if h.secondSlot(i) {
		kubecfg = h.second.kubecfg
	}
	args := []string{
		"--kubeconfig=" + kubecfg, "--cloud-provider=" + provider, "--cloud-config=" + cloudConfig,
		"--leader-elect=true", "--leader-elect-lease-duration=" + h.cfg.LeaseDuration.String(),
		"--leader-elect-renew-deadline=" + h.cfg.RenewDeadline.String(), "--leader-elect-retry-period=" + h.cfg.RetryPeriod.String(),
		"--secure-port=0",
	}
	switch {
	case h.shared(i):
		args = append(args, "--load-balancer-class="+foreignClass, "--leader-elect-resource-name="+sharedLeaseName,
			"--controllers=service-lb-controller", "--allocate-node-cidrs=false", "--configure-cloud-routes=false")
	case h.secondSlot(i):
		// Inside the first cluster's CIDR: the cloud keys routes by name,
		// which holds the node's UID, so the clusters' pod CIDRs may
		// overlap (test/shared does the same).
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr="+secondClusterCIDR, "--configure-cloud-routes=true",
			"--route-reconciliation-period=2s", "--node-monitor-period=2s")
	default:
		args = append(args, "--allocate-node-cidrs=true", "--cluster-cidr=198.18.0.0/16", "--configure-cloud-routes=true",
			"--route-reconciliation-period=2s", "--node-monitor-period=2s")
	}
	if h.cfg.Shared || h.cfg.SecondCluster {
		args = append(args, "--load-balancer-orphan-sweep-period="+orphanSweepPeriod.String())
	}
	if h.cfg.Hang {
		args = append(args, "--cloud-call-timeout="+hangCallTimeout.String())
	}
	return args
}

// replicaName is replica slot i's name in log files and caller names.
func (h *harness) replicaName(i int) string {
	if h.shared(i) {
		return fmt.Sprintf("%s%d", sharedCallerPrefix, i-h.cfg.Replicas)
	}
	if h.secondSlot(i) {
		return fmt.Sprintf("%s%d", secondCallerPrefix, i-h.cfg.Replicas-h.cfg.SharedReplicas)
	}
	return fmt.Sprintf("%s%d", callerPrefix, i)
}

// startReplica starts replica i. A replica that exits on its own (Outrigger
// exits when it loses its leader lease, as upstream's CCM does) is started
// again a second later, as the kubelet restarts a container.
func (h *harness) startReplica(i int) error {
	log, err := os.OpenFile(filepath.Join(h.dir, h.replicaName(i)+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// Each process its own caller name, so the cloud's call log tells who
	// called: the failover run recognises the leader by it.
	h.mu.Lock()
	h.starts++
	caller := fmt.Sprintf("%s-%d", h.replicaName(i), h.starts)
	h.mu.Unlock()
	simYAML, err := os.ReadFile(h.simYAML)
	if err != nil {
		log.Close()
		return err
	}
	cloudConfig := filepath.Join(h.dir, caller+".yaml")
	if err := os.WriteFile(cloudConfig, append(simYAML, []byte("caller: "+caller+"\n")...), 0o600); err != nil {
		log.Close()
		return err
	}
	cmd := exec.Command(h.cfg.Outrigger, h.replicaArgs(i, cloudConfig)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting Outrigger replica %d: %w", i, err)
	}
	r := &replica{cmd: cmd, done: make(chan struct{}), caller: caller}
	h.mu.Lock()
	taken := h.replicas[i] != nil
	select {
	case <-h.closing:
		taken = true // tearing down: not this one
	default:
	}
	if !taken {
		h.replicas[i] = r
	}
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		close(r.done)
		if taken {
			return
		}
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-h.closing:
			return
		case <-t.C:
		}
		// Only if nobody stopped it on purpose (the slot still holds it).
		h.mu.Lock()
		restart := h.replicas[i] == r
		if restart {
			h.replicas[i] = nil
		}
		h.mu.Unlock()
		if !restart {
			return
		}
		h.report.replicaExit()
		h.logf("Outrigger replica %s exited on its own (%v); restarted", h.replicaName(i), err)
		if err := h.startReplica(i); err != nil {
			h.logf("%v", err)
		}
	}()
	if taken {
		// Another start won the slot (a restart racing a fault's lift).
		_ = cmd.Process.Kill()
	}
	return nil
}

// stopReplica signals replica i and waits for it to exit; it is not
// restarted.
func (h *harness) stopReplica(i int, sig syscall.Signal) {
	h.mu.Lock()
	r := h.replicas[i]
	h.replicas[i] = nil
	h.mu.Unlock()
	if r == nil {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}
