//go:build integration

package node_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// A provider answering an instance type one past the 63 characters of a
// label value, a label of its own likewise, and addresses that are not
// what their type says: the node is initialized all the same with the
// rest, and an Event names the provider, the fields and the limits. Before,
// the API refused the whole patch and the node kept its taint for ever.
func TestNodeAnswerTheAPIRefusesIsLeftOut(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("limits")
	longType := strings.Repeat("t", 64)
	_, err := cloud.Create(simcloud.CreateRequest{Name: name, Type: longType, Zone: "zone-b",
		Labels: map[string]string{"example.com/long": strings.Repeat("v", 64), "example.com/ok": "yes"},
		Addresses: []simcloud.Address{
			{Type: "InternalIP", Address: "198.18.3.7"},
			{Type: "InternalIP", Address: "ip-198-18-3-8"},
			{Type: "PublicIP", Address: "198.18.3.9"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, nil)
	testenv.StartOutrigger(t, cloud)

	n := waitInitialized(t, name)
	if _, ok := n.Labels["node.kubernetes.io/instance-type"]; ok {
		t.Errorf("instance-type label %q set", n.Labels["node.kubernetes.io/instance-type"])
	}
	if _, ok := n.Labels["example.com/long"]; ok {
		t.Error("a label value of 64 characters set")
	}
	if n.Labels["topology.kubernetes.io/zone"] != "zone-b" || n.Labels["example.com/ok"] != "yes" {
		t.Errorf("labels %v lack the zone and example.com/ok", n.Labels)
	}
	if want := addrs("InternalIP", "198.18.3.7", "Hostname", name); !slices.Equal(n.Status.Addresses, want) {
		t.Errorf("addresses = %v, want %v", n.Status.Addresses, want)
	}
	testenv.Eventually(t, 10*time.Second, "ProviderAnswerRefused Events", func() (bool, error) {
		return len(testenv.Events(t, name)[node.ReasonAnswerRefused]) >= 2, nil
	})
	var all []string
	for _, e := range testenv.Events(t, name)[node.ReasonAnswerRefused] {
		all = append(all, e.Message)
	}
	msg := strings.Join(all, "\n")
	for _, want := range []string{"Provider sim", "status.addresses[1].address", "status.addresses[2].type",
		"metadata.labels[node.kubernetes.io/instance-type]", "metadata.labels[example.com/long]", "at most 63 characters"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Events %q do not say %q", msg, want)
		}
	}
}
