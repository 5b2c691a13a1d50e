package node

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
)

func makeNode(mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"keep": "me"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "other", Effect: corev1.TaintEffectNoSchedule},
			{Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func addrList(pairs ...string) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(pairs[i]), Address: pairs[i+1]})
	}
	return out
}

func TestInitialized(t *testing.T) {
	tests := []struct {
		name        string
		node        *corev1.Node
		md          cloudprovider.InstanceMetadata
		wantID      string
		wantLabels  map[string]string
		absent      []string
		wantSkipped int
	}{{
		name:   "everything set",
		node:   makeNode(),
		md:     cloudprovider.InstanceMetadata{ProviderID: "p://1", InstanceType: "big", Zone: "z", Region: "r"},
		wantID: "p://1",
		wantLabels: map[string]string{"keep": "me", labelInstanceType: "big", labelInstanceTypeBeta: "big", labelZone: "z",
			labelZoneFailureDomain: "z", labelRegion: "r", labelRegionFailureDomain: "r"},
	}, {
		name:       "existing providerID kept",
		node:       makeNode(func(n *corev1.Node) { n.Spec.ProviderID = "p://kubelet" }),
		md:         cloudprovider.InstanceMetadata{ProviderID: "p://1"},
		wantID:     "p://kubelet",
		wantLabels: map[string]string{"keep": "me"},
		absent:     []string{labelZone, labelInstanceType, labelRegion},
	}, {
		name: "additional labels: new applied, reserved and conflicting refused, equal accepted",
		node: makeNode(func(n *corev1.Node) { n.Labels["pool"] = "a"; n.Labels["same"] = "v" }),
		md: cloudprovider.InstanceMetadata{AdditionalLabels: map[string]string{
			"example.com/gpu": "true", "pool": "b", "same": "v",
			"kubernetes.io/x": "1", "node.kubernetes.io/y": "1", "k8s.io/z": "1", "sub.k8s.io/w": "1",
		}},
		wantLabels:  map[string]string{"example.com/gpu": "true", "pool": "a", "same": "v"},
		absent:      []string{"kubernetes.io/x", "node.kubernetes.io/y", "k8s.io/z", "sub.k8s.io/w"},
		wantSkipped: 5,
	}, {
		name: "labels one past the API's 63 characters are left off, never cut",
		node: makeNode(),
		md: cloudprovider.InstanceMetadata{Zone: strings.Repeat("z", 64), Region: strings.Repeat("r", 63), InstanceType: "m5 large",
			AdditionalLabels: map[string]string{"example.com/long": strings.Repeat("v", 64), "example.com/" + strings.Repeat("k", 64): "v", "example.com/ok": strings.Repeat("v", 63)}},
		wantLabels:  map[string]string{labelRegion: strings.Repeat("r", 63), labelRegionFailureDomain: strings.Repeat("r", 63), "example.com/ok": strings.Repeat("v", 63)},
		absent:      []string{labelZone, labelZoneFailureDomain, labelInstanceType, labelInstanceTypeBeta, "example.com/long"},
		wantSkipped: 4,
	}, {
		name:       "nil labels map",
		node:       makeNode(func(n *corev1.Node) { n.Labels = nil }),
		md:         cloudprovider.InstanceMetadata{Zone: "z"},
		wantLabels: map[string]string{labelZone: "z"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			orig := tc.node.DeepCopy()
			out, skipped := initialized(tc.node, &tc.md)
			if out.Spec.ProviderID != tc.wantID {
				t.Errorf("providerID = %q, want %q", out.Spec.ProviderID, tc.wantID)
			}
			for k, v := range tc.wantLabels {
				if out.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, out.Labels[k], v)
				}
			}
			for _, k := range tc.absent {
				if _, ok := out.Labels[k]; ok {
					t.Errorf("label %s set", k)
				}
			}
			if len(skipped) != tc.wantSkipped {
				t.Errorf("skipped %v, want %d", skipped, tc.wantSkipped)
			}
			if isUninitialized(out) || len(out.Spec.Taints) != 1 || out.Spec.Taints[0].Key != "other" {
				t.Errorf("taints = %v, want only the other taint", out.Spec.Taints)
			}
			if !isUninitialized(tc.node) || len(tc.node.Labels) != len(orig.Labels) {
				t.Error("input node was modified")
			}
		})
	}
}

func TestDesiredAddresses(t *testing.T) {
	cloudDual := addrList("InternalIP", "198.18.0.1", "InternalIP", "fd00::1", "ExternalIP", "203.0.113.1", "InternalDNS", "n1.internal")
	tests := []struct {
		name    string
		node    *corev1.Node
		cloud   []corev1.NodeAddress
		want    []corev1.NodeAddress
		wantOK  bool
		wantErr bool
		// wantRefused are the cloud's addresses the API does not take.
		wantRefused int
	}{
		{name: "cloud gave nothing: leave the node alone", node: makeNode(), cloud: nil, wantOK: false},
		{name: "dual stack kept in order, kubelet hostname appended", node: makeNode(func(n *corev1.Node) {
			n.Status.Addresses = addrList("Hostname", "host1")
		}), cloud: cloudDual, want: append(slices.Clone(cloudDual), addrList("Hostname", "host1")...), wantOK: true},
		{name: "cloud hostname wins over kubelet's", node: makeNode(func(n *corev1.Node) {
			n.Status.Addresses = addrList("Hostname", "host1")
		}), cloud: addrList("InternalIP", "198.18.0.1", "Hostname", "cloudhost"), want: addrList("InternalIP", "198.18.0.1", "Hostname", "cloudhost"), wantOK: true},
		{name: "provided IPv4 node IP", node: makeNode(func(n *corev1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "198.18.0.1"}
		}), cloud: cloudDual, want: addrList("InternalIP", "198.18.0.1", "ExternalIP", "203.0.113.1", "InternalDNS", "n1.internal"), wantOK: true},
		{name: "provided dual-stack node IPs", node: makeNode(func(n *corev1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "fd00::1,198.18.0.1"}
		}), cloud: cloudDual, want: addrList("InternalIP", "fd00::1", "InternalIP", "198.18.0.1", "ExternalIP", "203.0.113.1", "InternalDNS", "n1.internal"), wantOK: true},
		{name: "provided node IP unknown to the cloud", node: makeNode(func(n *corev1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "192.0.2.1"}
		}), cloud: cloudDual, wantErr: true},
		{name: "addresses the API does not take are left out, the others written", node: makeNode(),
			cloud: addrList("InternalIP", "ip-198-18-0-1", "InternalIP", "198.18.0.1", "PublicIP", "203.0.113.1", "InternalDNS", strings.Repeat("a", 254), "InternalIP", "198.18.0.1"),
			want:  addrList("InternalIP", "198.18.0.1"), wantOK: true, wantRefused: 4},
		{name: "no address the API takes: leave the node alone", node: makeNode(),
			cloud: addrList("InternalIP", "not-an-ip"), wantOK: false, wantRefused: 1},
		{name: "malformed provided node IP", node: makeNode(func(n *corev1.Node) {
			n.Annotations = map[string]string{cloudproviderapi.AnnotationAlphaProvidedIPAddr: "not-an-ip"}
		}), cloud: cloudDual, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, refused, ok, err := desiredAddresses(tc.node, tc.cloud)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %t", err, tc.wantErr)
			}
			if len(refused) != tc.wantRefused {
				t.Errorf("refused %v, want %d", refused, tc.wantRefused)
			}
			if ok != tc.wantOK || !slices.Equal(got, tc.want) {
				t.Errorf("got %v (ok %t), want %v (ok %t)", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAddressesEqualDualStackIsStable(t *testing.T) {
	a := addrList("InternalIP", "198.18.0.1", "InternalIP", "fd00::1")
	if !addressesEqual(a, slices.Clone(a)) {
		t.Error("identical dual-stack lists compare unequal: every refresh would rewrite the node")
	}
	if addressesEqual(a, addrList("InternalIP", "fd00::1", "InternalIP", "198.18.0.1")) {
		t.Error("reordered lists compare equal, but order picks the node IP")
	}
}

func TestInitializationPatch(t *testing.T) {
	md := &cloudprovider.InstanceMetadata{ProviderID: "p://1", Zone: "z", AdditionalLabels: map[string]string{"example.com/a-b": "x"}}
	apply := func(t *testing.T, base, node *corev1.Node) (*corev1.Node, error) {
		t.Helper()
		updated, _ := initialized(node, md)
		p, err := initializationPatch(node, updated)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := p.Data(nil)
		doc, _ := json.Marshal(base)
		out, err := jsonpatch.DecodePatch(data)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := out.Apply(doc)
		if err != nil {
			return nil, err
		}
		var n corev1.Node
		return &n, json.Unmarshal(patched, &n)
	}
	t.Run("applies to the node it was made from", func(t *testing.T) {
		node := makeNode()
		got, err := apply(t, node, node)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := initialized(node, md)
		if got.Spec.ProviderID != want.Spec.ProviderID || !reflect.DeepEqual(got.Labels, want.Labels) || !reflect.DeepEqual(got.Spec.Taints, want.Spec.Taints) {
			t.Errorf("patched node %+v\nwant %+v", got, want)
		}
	})
	t.Run("a concurrent unrelated change does not matter", func(t *testing.T) {
		node := makeNode()
		current := node.DeepCopy()
		current.Spec.PodCIDRs = []string{"198.18.0.0/24"}
		current.ResourceVersion = "2"
		got, err := apply(t, current, node)
		if err != nil || len(got.Spec.PodCIDRs) != 1 || isUninitialized(got) {
			t.Errorf("got %v, %v", got, err)
		}
	})
	t.Run("a taint added meanwhile is not dropped", func(t *testing.T) {
		node := makeNode()
		current := node.DeepCopy()
		current.Spec.Taints = append([]corev1.Taint{{Key: "new", Effect: corev1.TaintEffectNoExecute}}, current.Spec.Taints...)
		if _, err := apply(t, current, node); err == nil {
			t.Error("patch applied although the taints moved")
		}
	})
	t.Run("nil labels", func(t *testing.T) {
		node := makeNode(func(n *corev1.Node) { n.Labels = nil })
		got, err := apply(t, node, node)
		if err != nil || got.Labels[labelZone] != "z" || got.Labels["example.com/a-b"] != "x" {
			t.Errorf("got %v, %v", got, err)
		}
	})
}

func TestLabelsToReconcile(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{name: "no labels", labels: nil, want: nil},
		{name: "beta only: GA copied", labels: map[string]string{
			labelZoneFailureDomain: "z", labelRegionFailureDomain: "r", labelInstanceTypeBeta: "big",
		}, want: map[string]string{labelZone: "z", labelRegion: "r", labelInstanceType: "big"}},
		{name: "GA differs: beta wins", labels: map[string]string{labelZoneFailureDomain: "z", labelZone: "other"},
			want: map[string]string{labelZone: "z"}},
		{name: "in step", labels: map[string]string{labelZoneFailureDomain: "z", labelZone: "z", labelInstanceTypeBeta: "b", labelInstanceType: "b"}, want: nil},
		{name: "GA only: left alone", labels: map[string]string{labelZone: "z", labelRegion: "r"}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := labelsToReconcile(makeNode(func(n *corev1.Node) { n.Labels = tc.labels }))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
