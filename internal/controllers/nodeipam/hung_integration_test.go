//go:build integration

package nodeipam_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cloud-provider/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/nodeipam"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// cidrCloud is upstream's fake cloud that also assigns node CIDRs (a
// CloudAllocator provider), and never answers for the nodes its Hang
// selects.
type cidrCloud struct {
	*fake.Cloud
	hang *providertest.Hang
	next atomic.Int32
}

func (c *cidrCloud) NodeCIDRs(_ context.Context, n *corev1.Node) ([]string, error) {
	if c.hang.Wait(n.Name) {
		return nil, fmt.Errorf("node %s: the cloud never answered", n.Name)
	}
	i := c.next.Add(1)
	return []string{fmt.Sprintf("198.19.%d.0/24", i)}, nil
}

// A cloud hung on the CIDRs of some nodes costs only those nodes: more of
// them than the family runs at once, and the nodes that join after them get
// their CIDRs from the cloud all the same.
func TestHungCloudCIDRsCostOnlyTheirNodes(t *testing.T) {
	prefix := testenv.Name("hang")
	provider := &cidrCloud{Cloud: &fake.Cloud{}, hang: providertest.NewHang(t, providertest.Prefix(prefix))}
	layer := cloud.New(provider, cloud.Options{Timeout: 200 * time.Millisecond})
	src, ok := layer.NodeCIDRs()
	if !ok {
		t.Fatal("no node CIDRs behind the layer")
	}
	testenv.RunController(t, func(mgr manager.Manager) error {
		return nodeipam.Setup(mgr, nodeipam.Options{Type: nodeipam.CloudAllocator, Cloud: src})
	})

	const hung = cloud.DegradedAbandoned + 4 // more than the family runs at once, and degraded
	for i := range hung {
		testenv.CreateNode(t, fmt.Sprintf("%s-%d", prefix, i), nil)
	}
	testenv.Eventually(t, 30*time.Second, "every hung node's call abandoned", func() (bool, error) {
		return layer.Degraded()[cloud.FamilyNodeCIDRs] >= hung, nil
	})
	others := createNodes(t, "ok", 10)
	got := waitCIDRs(t, others)
	assertUnique(t, got)
	for i := range hung {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if n := testenv.GetNode(t, name); len(n.Spec.PodCIDRs) > 0 {
			t.Errorf("hung node %s got %v", name, n.Spec.PodCIDRs)
		}
		// Events are written after the abandoned call, through the event
		// queue: wait for this one.
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("hung node %s's %s Event", name, nodeipam.ReasonCIDRAssignmentFailed), func() (bool, error) {
			return len(testenv.Events(t, name)[nodeipam.ReasonCIDRAssignmentFailed]) > 0, nil
		})
	}
}
