//go:build integration

package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// startController runs the cloud-node-controller alone against provider
// until the test ends, for providers the sim cannot play.
func startController(t *testing.T, provider cloudprovider.Interface) {
	t.Helper()
	inst, ok := cloud.New(provider, cloud.Options{}).Instances()
	if !ok {
		t.Fatal("provider has no instances")
	}
	testenv.RunController(t, func(mgr manager.Manager) error {
		return node.Setup(mgr, node.Options{Instances: inst, RefreshPeriod: time.Hour})
	})
}

func TestEmptyProviderIDKeepsTheTaint(t *testing.T) {
	var giveID atomic.Bool
	startController(t, &fake.Cloud{
		EnableInstancesV2: true,
		OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			md := &cloudprovider.InstanceMetadata{Zone: "zone-a", NodeAddresses: addrs("InternalIP", "198.18.1.1")}
			if giveID.Load() {
				md.ProviderID = "fake://" + n.Name
			}
			return md, nil
		},
	})
	name := testenv.Name("noid")
	testenv.CreateNode(t, name, nil)
	testenv.Eventually(t, 20*time.Second, "SyncFailed event", func() (bool, error) {
		return len(testenv.Events(t, name)[node.ReasonSyncFailed]) > 0, nil
	})
	if n := testenv.GetNode(t, name); !tainted(n) {
		t.Fatalf("node without a provider ID was initialized: %+v", n.Spec)
	}
	// Retried with backoff: once the provider gives an ID, the node is done.
	giveID.Store(true)
	if n := waitInitialized(t, name); n.Spec.ProviderID != "fake://"+name {
		t.Errorf("providerID = %q", n.Spec.ProviderID)
	}

	// A provider ID kubelet set is enough.
	withID := testenv.Name("kubeletid")
	giveID.Store(false)
	testenv.CreateNode(t, withID, func(n *corev1.Node) { n.Spec.ProviderID = "fake://kubelet" })
	if n := waitInitialized(t, withID); n.Spec.ProviderID != "fake://kubelet" || n.Labels[corev1.LabelTopologyZone] != "zone-a" {
		t.Errorf("node = %+v %v", n.Spec, n.Labels)
	}
}

func TestInstancesV1WithoutInstanceIDInitializesByName(t *testing.T) {
	name := testenv.Name("v1")
	startController(t, providertest.NameOnly{Cloud: &fake.Cloud{
		Addresses:     addrs("InternalIP", "198.18.2.1"),
		InstanceTypes: map[types.NodeName]string{types.NodeName(name): "v1.large"},
		Zone:          cloudprovider.Zone{FailureDomain: "zone-v1", Region: "region-v1"},
	}})
	testenv.CreateNode(t, name, nil)
	n := waitInitialized(t, name)
	if n.Spec.ProviderID != "" {
		t.Errorf("providerID = %q, want none", n.Spec.ProviderID)
	}
	for k, v := range map[string]string{
		corev1.LabelInstanceTypeStable: "v1.large", corev1.LabelTopologyZone: "zone-v1", corev1.LabelTopologyRegion: "region-v1",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != "198.18.2.1" {
		t.Errorf("addresses = %v", n.Status.Addresses)
	}
}

func TestReconcilesGATopologyLabelsOfInitializedNodes(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name := testenv.Name("beta")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) {
		n.Spec.Taints = nil
		n.Labels[corev1.LabelFailureDomainBetaZone] = "zone-old"
		n.Labels[corev1.LabelFailureDomainBetaRegion] = "region-old"
		n.Labels[corev1.LabelInstanceType] = "type-old"
		n.Labels[corev1.LabelTopologyRegion] = "region-other" // beta wins, as upstream
	})
	testenv.StartOutrigger(t, cloud)
	want := map[string]string{
		corev1.LabelTopologyZone:       "zone-old",
		corev1.LabelTopologyRegion:     "region-old",
		corev1.LabelInstanceTypeStable: "type-old",
	}
	testenv.Eventually(t, 20*time.Second, "GA labels copied from the beta ones", func() (bool, error) {
		l := testenv.GetNode(t, name).Labels
		for k, v := range want {
			if l[k] != v {
				return false, nil
			}
		}
		return true, nil
	})

	// A beta label changed later is followed too.
	n := testenv.GetNode(t, name)
	n.Labels[corev1.LabelFailureDomainBetaZone] = "zone-new"
	if _, err := testenv.Client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "GA zone follows the beta zone", func() (bool, error) {
		return testenv.GetNode(t, name).Labels[corev1.LabelTopologyZone] == "zone-new", nil
	})
}

func TestUpstreamEventSourceAndMetrics(t *testing.T) {
	removal := metricstest.Value(t, "node_controller_cloud_provider_taint_removal_delay_seconds", nil)
	initial := metricstest.Value(t, "node_controller_initial_node_sync_delay_seconds", nil)
	cloud := testenv.StartCloud(t)
	name := testenv.Name("metrics")
	if _, err := cloud.Create(simcloud.CreateRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, nil)
	testenv.StartOutrigger(t, cloud)
	waitInitialized(t, name)
	var ev corev1.Event
	testenv.Eventually(t, 10*time.Second, "Synced event", func() (bool, error) {
		evs := testenv.Events(t, name)[node.ReasonSynced]
		if len(evs) == 0 {
			return false, nil
		}
		ev = evs[0]
		return true, nil
	})
	if ev.Source.Component != "cloud-node-controller" || ev.Type != corev1.EventTypeNormal {
		t.Errorf("Synced event from %q, type %s; want cloud-node-controller, Normal", ev.Source.Component, ev.Type)
	}
	if got := metricstest.Value(t, "node_controller_cloud_provider_taint_removal_delay_seconds", nil); got <= removal {
		t.Errorf("taint removal delay observed %v times, want more than %v", got, removal)
	}
	if got := metricstest.Value(t, "node_controller_initial_node_sync_delay_seconds", nil); got <= initial {
		t.Errorf("initial sync delay observed %v times, want more than %v", got, initial)
	}
}
