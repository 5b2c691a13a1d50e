// Package kubeletsim stands in for the kubelets of a development or test
// cluster whose machines are sim cloud instances. For every instance that is
// not terminated it registers a Node as a kubelet started with
// --cloud-provider=external does (the uninitialized taint, a Hostname
// address, Ready), keeps it Ready with heartbeats while the instance runs, and
// reports it NotReady once the instance stops or terminates, as the
// kube-controller-manager would after the kubelet fell silent. A node the
// lifecycle controller deleted is registered again only if its instance
// runs again.
package kubeletsim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// Lister is the part of the sim cloud the simulator watches.
type Lister interface {
	List() []simcloud.Instance
}

// Simulator registers and heartbeats nodes.
type Simulator struct {
	Cloud  Lister
	Client kubernetes.Interface
	// Period between syncs with the cloud. Default 1s.
	Period time.Duration
	// Heartbeat is how often a Ready node's condition is renewed.
	// Default 40s, kubelet's default node status report frequency.
	Heartbeat time.Duration
	// Workers for API writes. Default 32.
	Workers int

	lastBeat map[string]time.Time
}

// Run syncs until ctx ends.
func (s *Simulator) Run(ctx context.Context) {
	if s.Period <= 0 {
		s.Period = time.Second
	}
	if s.Heartbeat <= 0 {
		s.Heartbeat = 40 * time.Second
	}
	if s.Workers <= 0 {
		s.Workers = 32
	}
	s.lastBeat = map[string]time.Time{}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := s.Sync(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Simulating kubelets")
		}
	}, s.Period)
}

// Sync makes the nodes match the instances once.
func (s *Simulator) Sync(ctx context.Context) error {
	if s.lastBeat == nil {
		s.lastBeat = map[string]time.Time{}
	}
	list, err := s.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make(map[string]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[list.Items[i].Name] = &list.Items[i]
	}
	type work struct {
		in   simcloud.Instance
		node *corev1.Node
	}
	var todo []work
	now := time.Now()
	for _, in := range s.Cloud.List() {
		node := nodes[in.Name]
		switch {
		case node == nil && in.State == simcloud.StateRunning:
			todo = append(todo, work{in, nil})
		case node == nil:
		case in.State == simcloud.StateRunning && (!ready(node) || now.Sub(s.lastBeat[in.Name]) >= s.Heartbeat):
			todo = append(todo, work{in, node})
		case in.State != simcloud.StateRunning && ready(node):
			todo = append(todo, work{in, node})
		}
	}
	errs := make([]error, len(todo))
	beats := make([]bool, len(todo))
	workqueue.ParallelizeUntil(ctx, s.Workers, len(todo), func(i int) {
		w := todo[i]
		running := w.in.State == simcloud.StateRunning
		if w.node == nil {
			errs[i] = Register(ctx, s.Client, w.in.Name)
		} else {
			errs[i] = SetReady(ctx, s.Client, w.in.Name, running)
		}
		if errs[i] == nil && (w.node == nil || ready(w.node) != running) {
			errs[i] = setConditionTaints(ctx, s.Client, w.in.Name, running)
		}
		beats[i] = errs[i] == nil && running
	})
	for i, b := range beats {
		if b {
			s.lastBeat[todo[i].in.Name] = now
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NewNode is the Node a kubelet with --cloud-provider=external registers.
func NewNode(name string) *corev1.Node {
	now := metav1.Now()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{
			Key: cloudproviderapi.TaintExternalCloudProvider, Value: "true", Effect: corev1.TaintEffectNoSchedule,
		}}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}},
			Conditions: []corev1.NodeCondition{readyCondition(true, now)},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// Register creates the node; an existing one is left as is.
func Register(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Nodes().Create(ctx, NewNode(name), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	return nil
}

func readyCondition(ok bool, now metav1.Time) corev1.NodeCondition {
	if ok {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "Kubelet stopped posting node status.", LastHeartbeatTime: now, LastTransitionTime: now}
}

// conditionTaints are what kube-controller-manager's node lifecycle
// controller keeps in step with the Ready condition (the API server adds
// not-ready to every new node).
var conditionTaints = []corev1.Taint{
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
}

// setConditionTaints removes those taints from a Ready node and puts the
// unreachable one on a node that stopped reporting, as kube-controller-manager
// would; other taints are kept (the update is optimistic-locked).
func setConditionTaints(ctx context.Context, c kubernetes.Interface, name string, ready bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool {
			return slices.ContainsFunc(conditionTaints, func(ct corev1.Taint) bool { return ct.Key == t.Key && ct.Effect == t.Effect })
		})
		if !ready {
			taints = append(taints, conditionTaints[1])
		}
		if slices.Equal(taints, node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = taints
		_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating condition taints of node %s: %w", name, err)
	}
	return nil
}

// SetReady renews (ok) or drops (not ok) the node's Ready condition with a
// strategic merge patch keyed on the condition type, so other conditions
// and fields stay untouched.
func SetReady(ctx context.Context, c kubernetes.Interface, name string, ok bool) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{readyCondition(ok, metav1.Now())}}})
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().PatchStatus(ctx, name, patch)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("setting Ready=%t on node %s: %w", ok, name, err)
	}
	return nil
}
