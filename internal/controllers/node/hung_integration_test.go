//go:build integration

package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/node"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// A provider hung on some nodes (ignoring its context, as one stuck on a
// dead socket does) costs only those nodes: more of them than the instance
// family runs at once, and the nodes that join after them are initialized
// all the same.
func TestHungNodesCostOnlyThemselves(t *testing.T) {
	prefix := testenv.Name("hang")
	hang := providertest.NewHang(t, providertest.Prefix(prefix))
	layer := cloud.New(&fake.Cloud{
		EnableInstancesV2: true,
		OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			if hang.Wait(n.Name) {
				return nil, cloudprovider.InstanceNotFound
			}
			return &cloudprovider.InstanceMetadata{ProviderID: "fake://" + n.Name, NodeAddresses: addrs("InternalIP", "198.18.9.1")}, nil
		},
	}, cloud.Options{Timeout: 200 * time.Millisecond})
	inst, _ := layer.Instances()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return node.Setup(mgr, node.Options{Instances: inst, RefreshPeriod: time.Hour})
	})

	const hung = cloud.DegradedAbandoned + 4 // more than the family runs at once, and degraded
	for i := range hung {
		testenv.CreateNode(t, fmt.Sprintf("%s-%d", prefix, i), nil)
	}
	testenv.Eventually(t, 30*time.Second, "every hung node's call abandoned", func() (bool, error) {
		return layer.Degraded()[cloud.FamilyInstances] >= hung, nil
	})
	var others []string
	for range 10 {
		name := testenv.Name("ok")
		others = append(others, name)
		testenv.CreateNode(t, name, nil)
	}
	for _, name := range others {
		if n := waitInitialized(t, name); n.Spec.ProviderID != "fake://"+name {
			t.Errorf("node %s: providerID %q", name, n.Spec.ProviderID)
		}
	}
	for i := range hung {
		if n := testenv.GetNode(t, fmt.Sprintf("%s-%d", prefix, i)); !tainted(n) {
			t.Errorf("hung node %s lost its taint", n.Name)
		}
	}
}

// A node whose provider call runs past the straggle time is left by its
// worker, and initialized from that call's answer when it comes: the
// answer is kept for the node, which is requeued when the call returns,
// and no second call goes to the provider.
func TestSlowNodeIsInitializedFromItsDetachedCall(t *testing.T) {
	slow := testenv.Name("slow")
	hang := providertest.NewHang(t, func(name string) bool { return name == slow })
	layer := cloud.New(&fake.Cloud{
		EnableInstancesV2: true,
		OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			hang.Wait(n.Name)
			return &cloudprovider.InstanceMetadata{ProviderID: "fake://" + n.Name, NodeAddresses: addrs("InternalIP", "198.18.9.1")}, nil
		},
	}, cloud.Options{Timeout: time.Hour})
	inst, _ := layer.Instances()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return node.Setup(mgr, node.Options{Instances: inst, RefreshPeriod: time.Hour})
	})
	// The only call that fails here is the slow node's, left by its worker.
	left := metricstest.Counter(t, "outrigger_cloud_call_errors_total", map[string]string{"method": "InstanceMetadata"})
	before := left()
	testenv.CreateNode(t, slow, nil)
	testenv.Eventually(t, 30*time.Second, "the slow node's call left by its worker", func() (bool, error) {
		return hang.Calls() == 1 && left() > before, nil
	})
	hang.Release()
	if n := waitInitialized(t, slow); n.Spec.ProviderID != "fake://"+slow {
		t.Errorf("node %s: providerID %q", slow, n.Spec.ProviderID)
	}
	if got := hang.Calls(); got != 1 {
		t.Errorf("%d provider calls for the slow node, want 1: the left call's answer initializes it", got)
	}
}

// A node whose cloud call its worker left is not failing meanwhile: when
// the call returns a failure, the node is retried as after a first failure,
// as upstream's worker, which waits on the call, retries it; not after a
// backoff grown with every look at the call still running.
func TestDetachedCallFailureRetriedAsAFirstFailure(t *testing.T) {
	release := make(chan struct{})
	slow, clockNode := testenv.Name("slow"), testenv.Name("clock")
	var slowCalls, clockCalls atomic.Int64
	layer := cloud.New(&fake.Cloud{
		EnableInstancesV2: true,
		OverrideInstanceMetadata: func(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
			switch n.Name {
			case clockNode:
				clockCalls.Add(1)
				return nil, errors.New("the retry clock always fails")
			case slow:
				if slowCalls.Add(1) == 1 {
					<-release
					return nil, errors.New("released")
				}
			}
			return &cloudprovider.InstanceMetadata{ProviderID: "fake://" + n.Name, NodeAddresses: addrs("InternalIP", "198.18.9.1")}, nil
		},
	}, cloud.Options{Timeout: time.Hour})
	inst, _ := layer.Instances()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return node.Setup(mgr, node.Options{Instances: inst, RefreshPeriod: time.Hour})
	})
	// Answered calls first: a call straggles past its family's answers.
	for range 5 {
		waitInitialized(t, createNode(t, "ok"))
	}
	refused := metricstest.Counter(t, "outrigger_cloud_calls_in_flight_rejected_total", map[string]string{"method": "InstanceMetadata"})
	left := metricstest.Counter(t, "outrigger_cloud_call_errors_total", map[string]string{"method": "InstanceMetadata"})
	before := left()
	testenv.CreateNode(t, slow, nil)
	testenv.Eventually(t, 30*time.Second, "the slow node's call left by its worker", func() (bool, error) {
		return slowCalls.Load() == 1 && left() > before, nil
	})
	// The retry clock fails with the controller's backoff, doubling from
	// 5 ms. A node looked at on every retry while its call runs is refused
	// as often and grows its backoff as much.
	refusedBefore := refused()
	clock := testenv.Count(clockCalls.Load)
	testenv.CreateNode(t, clockNode, nil)
	testenv.Eventually(t, 60*time.Second, "ten attempts of the retry clock", func() (bool, error) { return clock() >= 10, nil })
	if n := refused() - refusedBefore; n > 1 {
		t.Errorf("the slow node was looked at %v times while its call ran; once it returns is enough", n)
	}
	at := clock()
	close(release)
	if n := waitInitialized(t, slow); n.Spec.ProviderID != "fake://"+slow {
		t.Errorf("node %s: providerID %q", slow, n.Spec.ProviderID)
	}
	if got := clock(); got > at {
		t.Errorf("the slow node was initialized after %v more attempts of the retry clock; a first failure's retry comes before its next", got-at)
	}
	if n := slowCalls.Load(); n != 2 {
		t.Errorf("the slow node's InstanceMetadata was called %d times, want 2 (the failed call, then the retry)", n)
	}
}

func createNode(t *testing.T, prefix string) string {
	t.Helper()
	name := testenv.Name(prefix)
	testenv.CreateNode(t, name, nil)
	return name
}
