package nodelifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/metricstest"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// perNode is a provider without batch calls: every node is asked about with
// InstanceExists and InstanceShutdown, as upstream asks.
type perNode struct {
	mu       sync.Mutex
	gone     map[string]bool
	shutdown map[string]bool
	failing  map[string]error
	asked    []string
}

func (p *perNode) SupportsBatch() bool { return false }
func (p *perNode) Lookup(context.Context, []*corev1.Node, cloud.Need) []provider.InstanceStatus {
	panic("Lookup called for a provider without batch calls")
}
func (p *perNode) InstanceExists(_ context.Context, n *corev1.Node) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, n.Name)
	if err := p.failing[n.Name]; err != nil {
		return false, err
	}
	return !p.gone[n.Name], nil
}
func (p *perNode) InstanceShutdown(_ context.Context, n *corev1.Node) (bool, error) {
	return p.shutdown[n.Name], nil
}

func lcNode(name string, ready corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.NodeSpec{Taints: taints}}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

func TestMonitorPerNodeCalls(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(
		lcNode("ready", corev1.ConditionTrue, ShutdownTaint),
		lcNode("gone", corev1.ConditionFalse),
		lcNode("unknown-gone", ""), // no Ready condition: Unknown, checked
		lcNode("stopped", corev1.ConditionUnknown),
		lcNode("failing", corev1.ConditionFalse),
		lcNode("running", corev1.ConditionFalse),
	).Build()
	p := &perNode{
		gone:     map[string]bool{"gone": true, "unknown-gone": true},
		shutdown: map[string]bool{"stopped": true},
		failing:  map[string]error{"failing": errors.New("boom")},
	}
	rec := record.NewFakeRecorder(10)
	ctrl := &Controller{client: c, nodes: cachednodes.FromReader(c), recorder: rec, opts: Options{Instances: p, Workers: 4}}

	calls := func(op, result string) float64 {
		return metricstest.Value(t, "cloud_node_lifecycle_controller_cloud_provider_calls_total", map[string]string{"operation": op, "result": result})
	}
	notFound, exists, shutdownOK, failed := calls(opInstanceExists, "instance_not_found"), calls(opInstanceExists, "success"),
		calls(opInstanceShutdown, "success"), calls(opInstanceExists, "error")
	passes := metricstest.Value(t, "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds", nil)

	ctrl.monitor(context.Background())

	get := func(name string) (*corev1.Node, error) {
		var n corev1.Node
		err := c.Get(context.Background(), client.ObjectKey{Name: name}, &n)
		return &n, err
	}
	for _, name := range []string{"gone", "unknown-gone"} {
		if _, err := get(name); !apierrors.IsNotFound(err) {
			t.Errorf("node %s: err %v, want deleted", name, err)
		}
	}
	for name, wantTaint := range map[string]bool{"ready": false, "stopped": true, "failing": false, "running": false} {
		n, err := get(name)
		if err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
		if got := hasShutdownTaint(n); got != wantTaint {
			t.Errorf("node %s: shutdown taint %t, want %t", name, got, wantTaint)
		}
	}
	for _, name := range p.asked {
		if name == "ready" {
			t.Error("a Ready node was asked about")
		}
	}
	if d := calls(opInstanceExists, "instance_not_found") - notFound; d != 2 {
		t.Errorf("instance_exists/instance_not_found +%v, want +2", d)
	}
	if d := calls(opInstanceExists, "success") - exists; d != 2 {
		t.Errorf("instance_exists/success +%v, want +2", d)
	}
	if d := calls(opInstanceShutdown, "success") - shutdownOK; d != 2 {
		t.Errorf("instance_shutdown/success +%v, want +2", d)
	}
	if d := calls(opInstanceExists, "error") - failed; d != 1 {
		t.Errorf("instance_exists/error +%v, want +1", d)
	}
	if got := metricstest.Value(t, "cloud_node_lifecycle_controller_monitor_nodes_duration_seconds", nil); got != passes+1 {
		t.Errorf("monitor_nodes_duration_seconds observed %v times, want %v", got, passes+1)
	}
	close(rec.Events)
	var deleting int
	for e := range rec.Events {
		if strings.HasPrefix(e, corev1.EventTypeNormal+" "+ReasonDeletingNode+" ") {
			deleting++
		}
	}
	if deleting != 2 {
		t.Errorf("%d %s events, want 2", deleting, ReasonDeletingNode)
	}
}

func TestMonitorBatchCountsAsUpstreamCalls(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(lcNode("b-gone", corev1.ConditionFalse), lcNode("b-running", corev1.ConditionFalse)).Build()
	b := batchOnly{"b-gone": {Exists: false}, "b-running": {Exists: true}}
	ctrl := &Controller{client: c, nodes: cachednodes.FromReader(c), recorder: record.NewFakeRecorder(10), opts: Options{Instances: b, Workers: 4}}
	calls := func(op, result string) float64 {
		return metricstest.Value(t, "cloud_node_lifecycle_controller_cloud_provider_calls_total", map[string]string{"operation": op, "result": result})
	}
	notFound, shut := calls(opInstanceExists, "instance_not_found"), calls(opInstanceShutdown, "success")
	ctrl.monitor(context.Background())
	if d := calls(opInstanceExists, "instance_not_found") - notFound; d != 1 {
		t.Errorf("instance_exists/instance_not_found +%v, want +1", d)
	}
	if d := calls(opInstanceShutdown, "success") - shut; d != 1 {
		t.Errorf("instance_shutdown/success +%v, want +1", d)
	}
}

type batchOnly map[string]provider.InstanceStatus

func (batchOnly) SupportsBatch() bool { return true }
func (b batchOnly) Lookup(_ context.Context, nodes []*corev1.Node, _ cloud.Need) []provider.InstanceStatus {
	out := make([]provider.InstanceStatus, len(nodes))
	for i, n := range nodes {
		out[i] = b[n.Name]
	}
	return out
}
func (batchOnly) InstanceExists(context.Context, *corev1.Node) (bool, error) {
	return false, cloudprovider.NotImplemented
}
func (batchOnly) InstanceShutdown(context.Context, *corev1.Node) (bool, error) {
	return false, cloudprovider.NotImplemented
}

// A node deleted between the pass's read and the taint's write is not an
// error: there is no taint left to set.
func TestShutdownTaintOfADeletedNodeIsNoError(t *testing.T) {
	n := lcNode("gone-meanwhile", corev1.ConditionFalse)
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, n.Name)
		},
	}).Build()
	ctrl := &Controller{client: c}
	if err := ctrl.setShutdownTaint(context.Background(), n, true); err != nil {
		t.Errorf("tainting a deleted node: %v", err)
	}
}
