//go:build integration

package outriggerdev

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testobj"
)

// TestDevClusters runs `outrigger dev --clusters 2` as a user would: two
// control planes on one sim cloud, one Outrigger in tenant mode. Each
// cluster's own nodes are initialized, each cluster's LoadBalancer Service
// gets a VIP from its own part of --lb-pool and answers from its own nodes,
// both tenants' Leases are held in the first cluster, the console's Tenants
// view shows both served by this replica, and SIGTERM stops both control
// planes.
func TestDevClusters(t *testing.T) {
	if _, err := apiserver.EnsureAssets(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "outrigger")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger").CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state")
	dev := exec.Command(bin, "dev", "--clusters=2", "--nodes=1", "--state-dir="+state, "--cloud-address=127.0.0.1:0", "--console-address=127.0.0.1:0",
		"--secure-port="+strconv.Itoa(testenv.FreePort(t)),
		"--node-ip-range=127.5.0.0/16", "--lb-pool=127.0.205.0/24", "--log-file="+filepath.Join(dir, "dev.log"))
	var out syncBuffer
	dev.Stdout, dev.Stderr = &out, &out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	t.Cleanup(func() {
		_ = dev.Process.Kill()
		if t.Failed() {
			t.Logf("outrigger dev output:\n%s", out.String())
			if log, err := os.ReadFile(filepath.Join(dir, "dev.log")); err == nil {
				t.Logf("its log (last 4000 bytes):\n%s", log[max(0, len(log)-4000):])
			}
		}
	})
	poll.Until(t, 3*time.Minute, "Outrigger running", func() bool { return strings.Contains(out.String(), "Outrigger is running") })

	ctx := context.Background()
	pools := map[string]string{"cluster-1": "127.0.205.0/25", "cluster-2": "127.0.205.128/25"}
	var clients []kubernetes.Interface
	for _, name := range []string{"cluster-1", "cluster-2"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, name+".kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		c := kubernetes.NewForConfigOrDie(cfg)
		clients = append(clients, c)
		node := name + "-node-1"
		poll.Until(t, 2*time.Minute, node+" initialized in "+name, func() bool {
			n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			return err == nil && n.Spec.ProviderID != "" && n.Labels["topology.kubernetes.io/zone"] != ""
		})
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 1 {
			t.Errorf("%s has %d nodes, want only its own one", name, len(nodes.Items))
		}

		svc := testobj.LBService("default", "web", testobj.Ports(80))
		if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var vip string
		poll.Until(t, time.Minute, name+"'s web VIP", func() bool {
			s, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false
			}
			vip = s.Status.LoadBalancer.Ingress[0].IP
			return true
		})
		if a, err := netip.ParseAddr(vip); err != nil || !netip.MustParsePrefix(pools[name]).Contains(a) {
			t.Errorf("%s's VIP %s, want one from its part of --lb-pool, %s", name, vip, pools[name])
		}
		poll.Until(t, 30*time.Second, "traffic through "+name+"'s VIP reaching its node", func() bool {
			body, err := get(vip+":80", "")
			return err == nil && strings.Contains(body, "Hello from "+node+" ")
		})
	}
	leases, err := clients[0].CoordinationV1().Leases("outrigger-tenants").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			held[l.Name] = true
		}
	}
	if !held["outrigger-tenant-cluster-1"] || !held["outrigger-tenant-cluster-2"] {
		t.Errorf("tenant Leases held: %v, want both clusters'", held)
	}
	// The console's Tenants view: both clusters served by this replica,
	// each with its cluster identity.
	m := regexp.MustCompile(`The web console [^\n]*: (http://\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("outrigger dev --clusters printed no console URL")
	}
	var snap console.Snapshot
	poll.Until(t, 30*time.Second, "both tenants Serving in the console", func() bool {
		resp, err := http.Get(m[1] + "api/snapshot")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		snap = console.Snapshot{}
		if json.NewDecoder(resp.Body).Decode(&snap) != nil || !snap.TenantMode || len(snap.Tenants) != 2 {
			return false
		}
		for _, tn := range snap.Tenants {
			if tn.State != "Serving" || !tn.HeldHere || tn.Cluster == "" {
				return false
			}
		}
		return snap.Tenants[0].Name == "cluster-1" && snap.Tenants[1].Name == "cluster-2"
	})

	if err := dev.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		t.Logf("outrigger dev exited after SIGTERM: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("outrigger dev did not exit after SIGTERM")
	}
	for i, c := range clients {
		if _, err := c.Discovery().ServerVersion(); err == nil {
			t.Errorf("cluster-%d's API server still answers after outrigger dev exited", i+1)
		}
	}
}
