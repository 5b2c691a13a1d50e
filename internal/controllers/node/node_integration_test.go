//go:build integration

package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func tainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cloudproviderapi.TaintExternalCloudProvider })
}

func waitInitialized(t *testing.T, name string) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	testenv.Eventually(t, 30*time.Second, "node "+name+" initialized", func() (bool, error) {
		node = testenv.GetNode(t, name)
		return !tainted(node), nil
	})
	return node
}

func addrs(pairs ...string) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(pairs[i]), Address: pairs[i+1]})
	}
	return out
}

func TestInitializesTaintedNode(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("init")
	in, err := cloud.Create(simcloud.CreateRequest{Name: name, Type: "sim.large", Zone: "zone-b", Labels: map[string]string{
		"example.com/pool":          "blue",
		"node.kubernetes.io/custom": "reserved", // kubernetes.io namespace: refused
		"team":                      "cloud",    // node already has team=node: kept
	}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) { n.Labels["team"] = "node" })
	testenv.StartOutrigger(t, cloud)

	node := waitInitialized(t, name)
	if want := "sim://" + in.ID; node.Spec.ProviderID != want {
		t.Errorf("providerID = %q, want %q", node.Spec.ProviderID, want)
	}
	wantLabels := map[string]string{
		"node.kubernetes.io/instance-type":         "sim.large",
		"beta.kubernetes.io/instance-type":         "sim.large",
		"topology.kubernetes.io/zone":              "zone-b",
		"failure-domain.beta.kubernetes.io/zone":   "zone-b",
		"topology.kubernetes.io/region":            in.Region,
		"failure-domain.beta.kubernetes.io/region": in.Region,
		"example.com/pool":                         "blue",
		"team":                                     "node",
	}
	for k, v := range wantLabels {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if _, ok := node.Labels["node.kubernetes.io/custom"]; ok {
		t.Error("a provider label in the kubernetes.io namespace was applied")
	}
	// Dual-stack: both InternalIPs, in the cloud's order.
	want := addrs("InternalIP", in.Addresses[0].Address, "InternalIP", in.Addresses[1].Address, "Hostname", name, "InternalDNS", in.Addresses[3].Address)
	if !slices.Equal(node.Status.Addresses, want) {
		t.Errorf("addresses = %v, want %v", node.Status.Addresses, want)
	}
	testenv.Eventually(t, 10*time.Second, "Synced event", func() (bool, error) {
		return len(testenv.Events(t, name)["Synced"]) > 0, nil
	})
}

func TestLeavesInitializedNodesAlone(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("plain")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) { n.Spec.Taints = nil })
	// A second, tainted node shows when the controller has done its work.
	marker := testenv.Name("marker")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: marker}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, marker, nil)
	testenv.StartOutrigger(t, cloud)
	waitInitialized(t, marker)
	if node := testenv.GetNode(t, name); node.Spec.ProviderID != "" || node.Labels["topology.kubernetes.io/zone"] != "" {
		t.Errorf("node without the uninitialized taint was initialized: providerID %q labels %v", node.Spec.ProviderID, node.Labels)
	}
}

func TestProvidedNodeIP(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		// want is built from the instance's addresses: v4, v6, host, dns.
		want        func(v4, v6, host, dns string) []corev1.NodeAddress
		initialized bool
	}{{
		name:       "IPv4 node IP keeps only that InternalIP",
		annotation: "v4",
		want: func(v4, v6, host, dns string) []corev1.NodeAddress {
			return addrs("InternalIP", v4, "Hostname", host, "InternalDNS", dns)
		},
		initialized: true,
	}, {
		name:       "IPv6 node IP keeps only that InternalIP",
		annotation: "v6",
		want: func(v4, v6, host, dns string) []corev1.NodeAddress {
			return addrs("InternalIP", v6, "Hostname", host, "InternalDNS", dns)
		},
		initialized: true,
	}, {
		name:       "dual-stack node IPs keep both, in the annotation's order",
		annotation: "v6,v4",
		want: func(v4, v6, host, dns string) []corev1.NodeAddress {
			return addrs("InternalIP", v6, "InternalIP", v4, "Hostname", host, "InternalDNS", dns)
		},
		initialized: true,
	}, {
		name:        "a node IP the cloud does not have leaves the node tainted",
		annotation:  "192.0.2.99",
		initialized: false,
	}}
	cloud := testenv.StartCloud(t)
	testenv.StartOutrigger(t, cloud)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := testenv.Name("nodeip")
			in, err := cloud.Create(simcloud.CreateRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			v4, v6, host, dns := in.Addresses[0].Address, in.Addresses[1].Address, in.Addresses[2].Address, in.Addresses[3].Address
			ann := tc.annotation
			switch ann {
			case "v4":
				ann = v4
			case "v6":
				ann = v6
			case "v6,v4":
				ann = v6 + "," + v4
			}
			testenv.CreateNode(t, name, func(n *corev1.Node) {
				n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: ann}
			})
			if !tc.initialized {
				testenv.Eventually(t, 20*time.Second, "SyncFailed event", func() (bool, error) {
					return len(testenv.Events(t, name)["SyncFailed"]) > 0, nil
				})
				if !tainted(testenv.GetNode(t, name)) {
					t.Fatal("node was initialized although its node IP is not the cloud's")
				}
				return
			}
			node := waitInitialized(t, name)
			if want := tc.want(v4, v6, host, dns); !slices.Equal(node.Status.Addresses, want) {
				t.Errorf("addresses = %v, want %v", node.Status.Addresses, want)
			}
		})
	}
}

func TestKeepsKubeletHostnameWhenCloudHasNone(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("nohost")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name, Addresses: []simcloud.Address{{Type: "InternalIP", Address: "198.18.9.1"}}}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, nil)
	testenv.StartOutrigger(t, cloud)
	node := waitInitialized(t, name)
	if want := addrs("InternalIP", "198.18.9.1", "Hostname", name); !slices.Equal(node.Status.Addresses, want) {
		t.Errorf("addresses = %v, want %v", node.Status.Addresses, want)
	}
}

func TestInitializesDespiteCloudFaults(t *testing.T) {
	tests := []struct {
		name     string
		settings simcloud.Settings
		// healAfter turns the fault off after this long (0: never).
		healAfter time.Duration
	}{
		{name: "throttled with 429", settings: simcloud.Settings{RateLimit: 1, RateBurst: 1}},
		{name: "half the calls fail", settings: simcloud.Settings{ErrorRate: 0.5}},
		{name: "every call hangs for a while", settings: simcloud.Settings{Hang: true}, healAfter: 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cloud := testenv.StartCloud(t)
			cloud.SetSettings(tc.settings)
			if tc.settings.RateLimit > 0 {
				// Spend the cloud's one token: Outrigger's first call is refused.
				_, _ = simcloud.NewClient(cloud.URL, time.Second, 0).List(context.Background())
			}
			var names []string
			for range 10 {
				name := testenv.Name("faulty")
				if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
					t.Fatal(err)
				}
				testenv.CreateNode(t, name, nil)
				names = append(names, name)
			}
			testenv.StartOutrigger(t, cloud, "--cloud-call-timeout=1s")
			if tc.healAfter > 0 {
				time.AfterFunc(tc.healAfter, func() { cloud.SetSettings(simcloud.Settings{}) })
			}
			for _, name := range names {
				waitInitialized(t, name)
			}
			if tc.settings.RateLimit > 0 && cloud.Calls().Throttled == 0 {
				t.Error("the cloud never throttled: the test did not exercise throttling")
			}
		})
	}
}

func TestAddressRefreshUsesBatchCalls(t *testing.T) {
	cloud := testenv.StartCloud(t)
	var names []string
	var ids []string
	for range 20 {
		name := testenv.Name("refresh")
		in, err := cloud.Create(simcloud.CreateRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		testenv.CreateNode(t, name, nil)
		names, ids = append(names, name), append(ids, in.ID)
	}
	testenv.StartOutrigger(t, cloud, "--node-status-update-frequency=300ms")
	for _, name := range names {
		waitInitialized(t, name)
	}
	// Dual-stack addresses are stable: refreshes must not rewrite them.
	rv := testenv.GetNode(t, names[0]).ResourceVersion
	cloud.ResetCalls()
	start := time.Now()
	// Three refresh passes (one batch call each) happened.
	testenv.Eventually(t, 10*time.Second, "three refresh passes", func() (bool, error) {
		return cloud.Calls().ByOp["BatchGetInstances"] >= 3, nil
	})
	elapsed := time.Since(start)
	if got := testenv.GetNode(t, names[0]).ResourceVersion; got != rv {
		t.Errorf("node rewritten by refreshes although its addresses did not change (resourceVersion %s -> %s)", rv, got)
	}
	calls := cloud.Calls()
	if calls.ByOp["GetInstance"] != 0 {
		t.Errorf("refresh should use batch calls only, got %v", calls.ByOp)
	}
	if limit := int64(elapsed/(300*time.Millisecond)) + 2; calls.ByOp["BatchGetInstances"] > limit {
		t.Errorf("%d batch calls in %s at a 300ms period: more than one per period", calls.ByOp["BatchGetInstances"], elapsed)
	}

	newAddrs := []simcloud.Address{{Type: "InternalIP", Address: "198.18.99.1"}, {Type: "ExternalIP", Address: "203.0.113.7"}}
	if err := cloud.SetAddresses(ids[3], newAddrs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "addresses refreshed", func() (bool, error) {
		got := testenv.GetNode(t, names[3]).Status.Addresses
		return slices.Equal(got, addrs("InternalIP", "198.18.99.1", "ExternalIP", "203.0.113.7", "Hostname", names[3])), nil
	})
}
