//go:build integration

package nodelifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// initializedNode creates an instance and its node, already initialized (as
// the cloud-node-controller leaves it), Ready or not.
func initializedNode(t *testing.T, cloud *testenv.Cloud, ready bool) (string, simcloud.Instance) {
	t.Helper()
	name := testenv.Name("lc")
	in, err := cloud.Create(simcloud.CreateRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CreateNode(t, name, func(n *corev1.Node) {
		n.Spec.Taints = nil
		n.Spec.ProviderID = "sim://" + in.ID
	})
	if !ready {
		testenv.SetReady(t, name, false)
	}
	return name, in
}

func exists(t *testing.T, name string) bool {
	t.Helper()
	_, err := testenv.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func hasShutdownTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == nodelifecycle.ShutdownTaint.Key && t.Effect == corev1.TaintEffectNoSchedule
	})
}

func TestDeletesNotReadyNodeWhoseInstanceIsGone(t *testing.T) {
	cloud := testenv.StartCloud(t)
	terminated, tin := initializedNode(t, cloud, false)
	deleted, din := initializedNode(t, cloud, false)
	readyButGone, rin := initializedNode(t, cloud, true)
	running, _ := initializedNode(t, cloud, false)
	for _, id := range []string{tin.ID, rin.ID} {
		if _, err := cloud.SetState(id, simcloud.StateTerminated); err != nil {
			t.Fatal(err)
		}
	}
	cloud.Delete(din.ID)
	testenv.StartOutrigger(t, cloud)

	notFound := metricstest.Value(t, "cloud_node_lifecycle_controller_cloud_provider_calls_total", map[string]string{"operation": "instance_exists", "result": "instance_not_found"})
	for _, name := range []string{terminated, deleted} {
		testenv.Eventually(t, 20*time.Second, "node "+name+" deleted", func() (bool, error) { return !exists(t, name), nil })
		// Events are posted asynchronously.
		var ev corev1.Event
		testenv.Eventually(t, 10*time.Second, nodelifecycle.ReasonDeletingNode+" event for "+name, func() (bool, error) {
			evs := testenv.Events(t, name)[nodelifecycle.ReasonDeletingNode]
			if len(evs) > 0 {
				ev = evs[0]
			}
			return len(evs) > 0, nil
		})
		// As upstream writes it.
		if ev.Source.Component != "cloud-node-lifecycle-controller" || ev.Type != corev1.EventTypeNormal ||
			ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.ResourceVersion != "" {
			t.Errorf("event source %q type %s about %+v", ev.Source.Component, ev.Type, ev.InvolvedObject)
		}
	}
	if got := metricstest.Value(t, "cloud_node_lifecycle_controller_cloud_provider_calls_total", map[string]string{"operation": "instance_exists", "result": "instance_not_found"}); got < notFound+2 {
		t.Errorf("cloud_provider_calls_total{instance_exists,instance_not_found} = %v, want at least %v", got, notFound+2)
	}
	// After several more monitor passes (the cloud asked again), the Ready
	// node and the node whose instance runs are still there.
	asked := cloud.Calls().Total
	testenv.Eventually(t, 30*time.Second, "more monitor passes", func() (bool, error) {
		return cloud.Calls().Total >= asked+4, nil
	})
	for _, name := range []string{readyButGone, running} {
		if !exists(t, name) {
			t.Errorf("node %s was deleted", name)
		}
	}
}

func TestNeverDeletesOnCloudFailure(t *testing.T) {
	tests := []struct {
		name     string
		settings simcloud.Settings
	}{
		{name: "every call fails", settings: simcloud.Settings{ErrorRate: 1}},
		{name: "every call is throttled", settings: simcloud.Settings{RateLimit: 0.001, RateBurst: 1}},
		{name: "every call hangs", settings: simcloud.Settings{Hang: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cloud := testenv.StartCloud(t)
			name, in := initializedNode(t, cloud, false)
			if _, err := cloud.SetState(in.ID, simcloud.StateTerminated); err != nil {
				t.Fatal(err)
			}
			if tc.settings.RateLimit > 0 {
				// Spend the one token, so every call of Outrigger's is refused.
				cloud.SetSettings(tc.settings)
				_, _ = simcloud.NewClient(cloud.URL, time.Second, 0).Get(context.Background(), in.ID)
			} else {
				cloud.SetSettings(tc.settings)
			}
			testenv.StartOutrigger(t, cloud, "--cloud-call-timeout=300ms")
			testenv.Eventually(t, 10*time.Second, "the cloud being asked", func() (bool, error) {
				return cloud.Calls().Total > 1, nil
			})
			monitorPasses(t, 3)
			if !exists(t, name) {
				t.Fatal("node deleted although the cloud never said its instance was gone")
			}
			// Once the cloud answers, the node goes.
			cloud.SetSettings(simcloud.Settings{})
			testenv.Eventually(t, 40*time.Second, "node deleted after the cloud recovered", func() (bool, error) { return !exists(t, name), nil })
		})
	}
}

func TestShutdownTaint(t *testing.T) {
	cloud := testenv.StartCloud(t)
	name, in := initializedNode(t, cloud, false)
	if _, err := cloud.SetState(in.ID, simcloud.StateStopped); err != nil {
		t.Fatal(err)
	}
	testenv.StartOutrigger(t, cloud)
	testenv.Eventually(t, 10*time.Second, "shutdown taint added", func() (bool, error) {
		return hasShutdownTaint(testenv.GetNode(t, name)), nil
	})
	if !exists(t, name) {
		t.Fatal("a shut-down node was deleted")
	}
	if _, err := cloud.SetState(in.ID, simcloud.StateRunning); err != nil {
		t.Fatal(err)
	}
	testenv.SetReady(t, name, true)
	testenv.Eventually(t, 10*time.Second, "shutdown taint removed", func() (bool, error) {
		return !hasShutdownTaint(testenv.GetNode(t, name)), nil
	})
}

func TestReadyNodesCostNoCloudCalls(t *testing.T) {
	cloud := testenv.StartCloud(t)
	for range 5 {
		initializedNode(t, cloud, true)
	}
	testenv.StartOutrigger(t, cloud, "--controllers=cloud-node-lifecycle-controller")
	monitorPasses(t, 3)
	if calls := cloud.Calls(); calls.Total != 0 {
		t.Errorf("lifecycle checks of Ready nodes called the cloud: %v", calls.ByOp)
	}
}

// monitorPasses waits until the lifecycle monitor has finished n more
// passes over the nodes (its duration histogram counts one per pass): for
// checks that something did NOT happen, proof that it had the chance.
func monitorPasses(t *testing.T, n float64) {
	t.Helper()
	const passes = "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds"
	from := metricstest.Value(t, passes, nil)
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%v more lifecycle monitor passes", n), func() (bool, error) {
		return metricstest.Value(t, passes, nil) >= from+n, nil
	})
}
