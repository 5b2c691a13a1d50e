//go:build integration

package nodeipam_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/apiproxy"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// ipamFlags run only the IPAM controller, with the given cluster CIDR.
func ipamFlags(clusterCIDR string, extra ...string) []string {
	return append([]string{"--controllers=node-ipam-controller", "--allocate-node-cidrs", "--cluster-cidr=" + clusterCIDR}, extra...)
}

func createNodes(t *testing.T, prefix string, n int) []string {
	t.Helper()
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := range names {
		names[i] = testenv.Name(prefix)
		wg.Go(func() { testenv.CreateNode(t, names[i], nil) })
	}
	wg.Wait()
	return names
}

// waitCIDRs waits until every node has pod CIDRs and returns them by node.
func waitCIDRs(t *testing.T, names []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	testenv.Eventually(t, 60*time.Second, "pod CIDRs on every node", func() (bool, error) {
		for _, n := range names {
			if _, ok := out[n]; ok {
				continue
			}
			node := testenv.GetNode(t, n)
			if len(node.Spec.PodCIDRs) == 0 {
				return false, nil
			}
			if node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
				t.Fatalf("node %s: podCIDR %q is not podCIDRs[0] of %v", n, node.Spec.PodCIDR, node.Spec.PodCIDRs)
			}
			out[n] = node.Spec.PodCIDRs
		}
		return true, nil
	})
	return out
}

func assertUnique(t *testing.T, got ...map[string][]string) {
	t.Helper()
	owner := map[string]string{}
	for _, m := range got {
		for node, cidrs := range m {
			for _, c := range cidrs {
				if other, dup := owner[c]; dup && other != node {
					t.Fatalf("CIDR %s given to both %s and %s", c, other, node)
				}
				owner[c] = node
			}
		}
	}
}

func TestAllocatesPodCIDRs(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		flags   []string
		want    []string // prefix per family, in order
	}{
		{name: "IPv4", cluster: "198.18.0.0/16", want: []string{"198.18.0.0/16:24"}},
		{name: "IPv6", cluster: "fd00:10:244::/56", want: []string{"fd00:10:244::/56:64"}},
		{name: "dual-stack", cluster: "198.18.0.0/16,fd00:10:244::/56", flags: []string{"--node-cidr-mask-size-ipv4=26", "--node-cidr-mask-size-ipv6=72"},
			want: []string{"198.18.0.0/16:26", "fd00:10:244::/56:72"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cloud := testenv.StartCloud(t)
			testenv.StartOutrigger(t, cloud, ipamFlags(tc.cluster, tc.flags...)...)
			got := waitCIDRs(t, createNodes(t, "ipam", 3))
			for node, cidrs := range got {
				if len(cidrs) != len(tc.want) {
					t.Fatalf("node %s: %v, want %d CIDRs", node, cidrs, len(tc.want))
				}
				for i, c := range cidrs {
					p := netip.MustParsePrefix(c)
					cluster := netip.MustParsePrefix(tc.want[i][:len(tc.want[i])-3])
					if !cluster.Contains(p.Addr()) || p.String() != p.Masked().String() || "/"+tc.want[i][len(tc.want[i])-2:] != c[len(c)-3:] {
						t.Errorf("node %s CIDR %s is not a %s subnet of %s", node, c, tc.want[i][len(tc.want[i])-2:], cluster)
					}
				}
			}
			assertUnique(t, got)
		})
	}
}

func TestNoDuplicatesUnderConcurrentJoins(t *testing.T) {
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud, ipamFlags("198.18.0.0/16,fd00:100::/56")...)
	got := waitCIDRs(t, createNodes(t, "storm", 200))
	assertUnique(t, got)
}

func TestRebuildsStateAfterRestart(t *testing.T) {
	cloud := testenv.StartCloud(t)
	first := testenv.StartOutrigger(t, cloud, ipamFlags("198.18.0.0/17")...)
	before := waitCIDRs(t, createNodes(t, "restart", 5))
	first.Stop()
	testenv.StartOutrigger(t, cloud, ipamFlags("198.18.0.0/17")...)
	after := waitCIDRs(t, createNodes(t, "restart", 5))
	assertUnique(t, before, after)
}

// A leader stops mid-allocation, with CIDRs given to some nodes and
// reserved in memory for others whose writes are in flight; the next leader
// gives the rest CIDRs none of the first leader's nodes holds.
func TestNoDuplicatesAcrossLeaderChange(t *testing.T) {
	lease := testenv.Name("ipam-lease")
	flags := ipamFlags("198.18.128.0/17", "--leader-elect=true", "--leader-elect-resource-name="+lease,
		"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=100ms")
	// A reaches the API server through a proxy that lets its first
	// `written` node patches (each gives a node its CIDRs) through and
	// holds every later one until A stops: A stops mid-allocation, at a
	// known point.
	const written = 10
	var patches atomic.Int32
	held := make(chan struct{})
	var holding sync.Once
	proxy := apiproxy.Start(t, func(r *http.Request) bool {
		if _, node := apiproxy.IsNodePath(r.URL.Path); !node || r.Method != http.MethodPatch || patches.Add(1) <= written {
			return true
		}
		holding.Do(func() { close(held) })
		<-r.Context().Done() // the write dies with A, never applied
		return false
	})
	a := testenv.StartOutrigger(t, testenv.StartCloud(t), append(flags, "--kubeconfig="+proxy.Kubeconfig)...)
	// A holds the lease before B starts.
	testenv.Eventually(t, 20*time.Second, "a leader", func() (bool, error) {
		l, err := testenv.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), lease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	testenv.StartOutrigger(t, testenv.StartCloud(t), flags...)
	var names []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			n := createNodes(t, "failover", 25)
			mu.Lock()
			names = append(names, n...)
			mu.Unlock()
		})
	}
	wg.Wait()
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatalf("A made %d node patches, never more than %d", patches.Load(), written)
	}
	withCIDRs := func() int {
		list, err := testenv.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, node := range list.Items {
			if slices.Contains(names, node.Name) && len(node.Spec.PodCIDRs) > 0 {
				n++
			}
		}
		return n
	}
	// Mid-allocation: A's writes landed, no other node has CIDRs (B
	// waits for the lease A still renews), and A has a CIDR reserved for
	// the node whose write is held.
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("A's %d writes on the nodes, and no more", written), func() (bool, error) {
		n := withCIDRs()
		return n == written, fmt.Errorf("%d nodes have CIDRs", n)
	})
	stopped := make(chan struct{})
	go func() { a.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("A did not stop while its writes were in flight")
	}
	assertUnique(t, waitCIDRs(t, names))
}

func TestExhaustionAndRelease(t *testing.T) {
	cloud := testenv.StartCloud(t)
	// A /30 cut into /31s: room for two nodes.
	testenv.StartOutrigger(t, cloud, ipamFlags("198.18.253.0/30", "--node-cidr-mask-size-ipv4=31")...)
	two := createNodes(t, "full", 2)
	waitCIDRs(t, two)
	third := testenv.Name("full")
	testenv.CreateNode(t, third, nil)
	testenv.Eventually(t, 20*time.Second, "CIDRNotAvailable event", func() (bool, error) {
		return len(testenv.Events(t, third)[nodeipam.ReasonCIDRNotAvailable]) > 0, nil
	})
	if n := testenv.GetNode(t, third); len(n.Spec.PodCIDRs) != 0 {
		t.Fatalf("node got %v from an exhausted range", n.Spec.PodCIDRs)
	}
	// Others keep working: deleting a node frees its CIDR for the third.
	if err := testenv.Client.CoreV1().Nodes().Delete(context.Background(), two[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCIDRs(t, []string{third})
}

func TestCloudAllocator(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("cloudipam")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) {})
	testenv.StartOutrigger(t, cloud, ipamFlags("198.19.0.0/17,fd00:200::/48", "--cidr-allocator-type=CloudAllocator")...)
	got := waitCIDRs(t, []string{name})[name]
	want, _ := cloud.PodCIDRs(name)
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("node has %v, the cloud assigned %v", got, want)
	}
}

// A pod CIDR patch whose answer was lost (a timeout, a 504 from a load
// balancer in front of the API server), and which the API server carries
// out afterwards, keeps its reservation: the CIDR is the node's, and never
// given to another node, even with the range exhausted and a node waiting
// for one. Had it gone back to the pool, the node joining meanwhile would
// have been given it, and the late write would have made it two nodes'.
func TestLostAnswerKeepsTheCIDR(t *testing.T) {
	last := testenv.Name("lost")
	var losing atomic.Bool
	var lostPatches atomic.Int32
	losing.Store(true)
	proxy := apiproxy.StartLossy(t, true, func(r *http.Request) bool {
		name, node := apiproxy.IsNodePath(r.URL.Path)
		if node && name == last && r.Method == http.MethodPatch && losing.Load() {
			lostPatches.Add(1)
			return true
		}
		return false
	})
	// A /29 cut into /31s: room for four nodes.
	testenv.StartOutrigger(t, testenv.StartCloud(t), ipamFlags("198.18.252.0/29", "--node-cidr-mask-size-ipv4=31", "--kubeconfig="+proxy.Kubeconfig)...)
	first := createNodes(t, "lost", 3)
	waitCIDRs(t, first)
	// The fourth node takes the last CIDR; the answers to its patches are
	// lost, and the writes carried out late.
	testenv.CreateNode(t, last, nil)
	testenv.Eventually(t, 30*time.Second, "three of the last node's patches answered 504", func() (bool, error) {
		return lostPatches.Load() >= 3, nil
	})
	waiting := testenv.Name("lost")
	testenv.CreateNode(t, waiting, nil)
	testenv.Eventually(t, 30*time.Second, "the fifth node told none is left, or given one", func() (bool, error) {
		return len(testenv.Events(t, waiting)[nodeipam.ReasonCIDRNotAvailable]) > 0 || len(testenv.GetNode(t, waiting).Spec.PodCIDRs) > 0, nil
	})
	losing.Store(false)
	got := waitCIDRs(t, append(first, last))
	if n := testenv.GetNode(t, waiting); len(n.Spec.PodCIDRs) > 0 {
		got[waiting] = n.Spec.PodCIDRs
	}
	assertUnique(t, got)
	if _, ok := got[waiting]; ok {
		t.Errorf("the fifth node got %v from a range whose four CIDRs were taken", got[waiting])
	}
	if proxy.Lost() == 0 {
		t.Error("no lost patch was carried out late")
	}
}
