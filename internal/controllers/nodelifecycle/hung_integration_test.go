//go:build integration

package nodelifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodelifecycle"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// hangingInstances never answers for the nodes its Hang selects; every
// other node's instance is gone.
type hangingInstances struct{ hang *providertest.Hang }

func (h hangingInstances) wait(n *corev1.Node) bool { return h.hang.Wait(n.Name) }

func (h hangingInstances) InstanceExists(_ context.Context, n *corev1.Node) (bool, error) {
	return h.wait(n), nil
}

func (h hangingInstances) InstanceShutdown(_ context.Context, n *corev1.Node) (bool, error) {
	h.wait(n)
	return false, nil
}

func (h hangingInstances) InstanceMetadata(_ context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	h.wait(n)
	return nil, cloudprovider.InstanceNotFound
}

type hangingCloud struct {
	*fake.Cloud
	instances hangingInstances
}

func (c hangingCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c.instances, true }

// A provider hung on some NotReady nodes costs only those nodes: more of
// them than the instance family runs at once, and the other NotReady nodes
// whose instances are gone are deleted all the same.
func TestHungNodesDoNotHoldTheMonitor(t *testing.T) {
	prefix := testenv.Name("hang")
	layer := cloud.New(hangingCloud{Cloud: &fake.Cloud{}, instances: hangingInstances{providertest.NewHang(t, providertest.Prefix(prefix))}},
		cloud.Options{Timeout: 200 * time.Millisecond})
	inst, _ := layer.Instances()
	testenv.RunController(t, func(mgr manager.Manager) error {
		return nodelifecycle.Setup(mgr, nodelifecycle.Options{Instances: inst, MonitorPeriod: 200 * time.Millisecond})
	})
	notReady := func(name string) {
		testenv.CreateNode(t, name, func(n *corev1.Node) {
			n.Spec.Taints = nil
			n.Spec.ProviderID = "fake://" + name
		})
		testenv.SetReady(t, name, false)
	}
	const hung = cloud.DegradedAbandoned + 4 // more than the family runs at once, and degraded
	for i := range hung {
		notReady(fmt.Sprintf("%s-%d", prefix, i))
	}
	testenv.Eventually(t, 30*time.Second, "every hung node's call abandoned", func() (bool, error) {
		return layer.Degraded()[cloud.FamilyInstances] >= hung, nil
	})
	var gone []string
	for range 5 {
		name := testenv.Name("gone")
		gone = append(gone, name)
		notReady(name)
	}
	testenv.Eventually(t, 30*time.Second, "the NotReady nodes whose instances are gone deleted", func() (bool, error) {
		for _, name := range gone {
			if exists(t, name) {
				return false, nil
			}
		}
		return true, nil
	})
	for i := range hung {
		if name := fmt.Sprintf("%s-%d", prefix, i); !exists(t, name) {
			t.Errorf("hung node %s was deleted", name)
		}
	}
}
