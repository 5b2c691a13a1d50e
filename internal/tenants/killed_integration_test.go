//go:build integration

package tenants_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/tenants"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// process is an Outrigger replica in tenant mode run as its own OS process
// (the binary of cmd/outrigger), so that it can be SIGKILLed: no stop, no
// release of its Leases, no deletion of its member Lease.
type process struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the exit, once done is closed
}

// buildOutrigger builds cmd/outrigger, the binary a Deployment runs, into
// the test's temp dir.
func buildOutrigger(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outrigger")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger").CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	return bin
}

// startProcess runs bin as replica id on the tenants of ns with the
// arguments testenv.StartOutrigger gives an in-process one (the management
// cluster's kubeconfig, the sim cloud's config naming the replica as
// caller) and flags(ns, id). It is killed when the test ends; its log, in
// the test's temp dir, is printed if the test failed.
func startProcess(t *testing.T, bin string, cloud *testenv.Cloud, ns, id string) *process {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.yaml")
	if err := os.WriteFile(cfg, cloudConfig(cloud, id), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, id+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + testenv.Kubeconfig, "--cloud-provider=sim", "--cloud-config=" + cfg,
		"--secure-port=0", "--leader-elect=false", "--node-monitor-period=200ms", "--cloud-call-timeout=3s"}, flags(ns, id)...)
	p := &process{id: id, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("starting replica %s: %v", id, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		log.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("replica %s (exit: %v), its log (last 6000 bytes):\n%s", id, p.err, b[max(0, len(b)-6000):])
		}
	})
	return p
}

// kill SIGKILLs the process and waits for it to exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// running fails the test if the process has exited.
func (p *process) running(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("replica %s exited: %v", p.id, p.err)
	default:
	}
}

// Two replicas run as processes share three tenants; one is SIGKILLed.
// Its tenants stay its until their Leases expire, the survivor's own
// tenants are served meanwhile (a node added to one after the kill is
// initialized before the Leases expire), and then the survivor claims the
// killed replica's tenants, no earlier than their expiry, and serves them
// (a node added to each after the kill is initialized).
func TestTenantsOfAKilledReplicaServedAgain(t *testing.T) {
	cloud := testenv.StartCloud(t)
	ns := namespace(t)
	all := []*tenant{startTenant(t, "killed-a"), startTenant(t, "killed-b"), startTenant(t, "killed-c")}
	for _, tn := range all {
		putSecret(t, ns, tn.name, map[string][]byte{tenants.KeyKubeconfig: tn.kc})
	}
	bin := buildOutrigger(t)
	killed, survivor := startProcess(t, bin, cloud, ns, "r1"), startProcess(t, bin, cloud, ns, "r2")

	nodes := map[*tenant]string{}
	for i, tn := range all {
		nodes[tn] = tn.addNode(t, cloud, fmt.Sprintf("198.18.15.%d", i+1))
	}
	byHolder := func() map[string][]*tenant {
		out := map[string][]*tenant{}
		for _, tn := range all {
			h := holderOf(t, ns, tn.name)
			out[h] = append(out[h], tn)
		}
		return out
	}
	testenv.Eventually(t, 90*time.Second, "each replica holds a tenant and every tenant's node is initialized", func() (bool, error) {
		killed.running(t)
		survivor.running(t)
		held := byHolder()
		if len(held[killed.id]) == 0 || len(held[survivor.id]) == 0 || len(held[killed.id])+len(held[survivor.id]) != len(all) {
			return false, fmt.Errorf("tenants by holder %v", names(held))
		}
		for _, tn := range all {
			if !tn.initialized(t, nodes[tn]) {
				return false, fmt.Errorf("node %s of %s not initialized", nodes[tn], tn.name)
			}
		}
		return true, nil
	})

	killed.kill()
	killedAt := time.Now()
	held := byHolder()
	orphans, own := held[killed.id], held[survivor.id]
	t.Logf("SIGKILLed %s holding %v; %s holds %v", killed.id, tenantNames(orphans), survivor.id, tenantNames(own))
	if len(orphans) == 0 || len(own) == 0 {
		t.Fatalf("at the kill, tenants by holder %v: want some on each replica", names(held))
	}
	// When each of the killed replica's Leases expires: its last renewal
	// (the process is gone, nothing renews it) plus its duration.
	expiry := map[*tenant]time.Time{}
	var first time.Time
	for _, tn := range orphans {
		l, ok := lease(t, ns, tn.name)
		if !ok || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			t.Fatalf("the Lease of %s held by the killed replica: %+v", tn.name, l)
		}
		expiry[tn] = l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		if first.IsZero() || expiry[tn].Before(first) {
			first = expiry[tn]
		}
	}
	late := map[*tenant]string{}
	for i, tn := range append(slices.Clone(own[:1]), orphans...) {
		late[tn] = tn.addNode(t, cloud, fmt.Sprintf("198.18.15.%d", 10+i))
	}

	// In the gap: the survivor's tenant is served while the killed
	// replica's Leases have not yet expired.
	gap := own[0]
	var seen time.Time
	testenv.Eventually(t, time.Until(first), "the survivor's tenant's new node initialized before the killed replica's Leases expire", func() (bool, error) {
		seen = time.Now()
		survivor.running(t)
		return holderOf(t, ns, gap.name) == survivor.id && gap.initialized(t, late[gap]), nil
	})
	if seen.After(first) {
		t.Errorf("the survivor's tenant's new node seen initialized at %v, after the killed replica's first Lease expired at %v", seen, first)
	}
	t.Logf("the survivor's new node initialized %v after the kill, %v before the killed replica's first Lease expired", seen.Sub(killedAt), first.Sub(seen))

	testenv.Eventually(t, 60*time.Second, "the killed replica's tenants held by the survivor and their new nodes initialized", func() (bool, error) {
		survivor.running(t)
		for _, tn := range orphans {
			if h := holderOf(t, ns, tn.name); h != survivor.id {
				return false, fmt.Errorf("%s held by %q", tn.name, h)
			}
			if !tn.initialized(t, late[tn]) {
				return false, fmt.Errorf("node %s of %s not initialized", late[tn], tn.name)
			}
		}
		return true, nil
	})
	t.Logf("the killed replica's tenants served again %v after the kill", time.Since(killedAt))
	for _, tn := range orphans {
		l, _ := lease(t, ns, tn.name)
		if l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Time.Before(expiry[tn]) {
			t.Errorf("%s claimed by %s at %v, before the killed replica's Lease expired at %v", tn.name, survivor.id, l.Spec.AcquireTime, expiry[tn])
		}
	}
	for _, tn := range own {
		if h := holderOf(t, ns, tn.name); h != survivor.id {
			t.Errorf("the survivor's own tenant %s now held by %q", tn.name, h)
		}
	}
}

// names lists the tenants' names by holder, for messages.
func names(byHolder map[string][]*tenant) map[string][]string {
	out := map[string][]string{}
	for h, tns := range byHolder {
		out[h] = tenantNames(tns)
	}
	return out
}

func tenantNames(tns []*tenant) []string {
	out := make([]string, 0, len(tns))
	for _, tn := range tns {
		out = append(out, tn.name)
	}
	return out
}
