// Package nodelifecycle is the cloud-node-lifecycle-controller. Every
// monitor period it looks at the nodes that are not Ready and asks the cloud
// about them: a node whose instance the cloud positively reports gone is
// deleted, and one whose instance is shut down gets the
// node.cloudprovider.kubernetes.io/shutdown taint, removed once the node is
// Ready again. An error, a timeout or a throttle from the cloud is never
// read as "gone". The on-cluster behaviour is upstream's; the cloud cost is
// not: Ready nodes cost no cloud call, and NotReady ones are asked about in
// batch calls when the provider offers them.
package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/internal/cloud"
	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"github.com/outrigger-ccm/outrigger/internal/platform"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Name is the controller's name, as upstream's, for --controllers.
const Name = "cloud-node-lifecycle-controller"

// EventSource is the component upstream's cloud-node-lifecycle-controller
// writes its Events as.
const EventSource = "cloud-node-lifecycle-controller"

// Event reasons, as upstream's.
const (
	ReasonDeletingNode       = "DeletingNode"
	ReasonDeletingNodeFailed = "DeletingNodeFailed"
)

// ShutdownTaint marks a node whose instance is shut down.
var ShutdownTaint = corev1.Taint{Key: cloudproviderapi.TaintNodeShutdown, Effect: corev1.TaintEffectNoSchedule}

// Instances is what this controller needs from the cloud-call layer.
type Instances interface {
	SupportsBatch() bool
	Lookup(ctx context.Context, nodes []*corev1.Node, need cloud.Need) []provider.InstanceStatus
	InstanceExists(ctx context.Context, node *corev1.Node) (bool, error)
	InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error)
}

// Options configure the controller.
type Options struct {
	Instances Instances
	// MonitorPeriod is how often nodes are checked (--node-monitor-period).
	// Default 5s.
	MonitorPeriod time.Duration
	// Workers bound concurrent cloud lookups and API writes. Default 64.
	Workers int
	// Platforms are the nodes this Outrigger serves: any other node is
	// never tainted or deleted, whatever the cloud says of it.
	Platforms platform.Set
	// Provider names the provider when an Outrigger runs several: the
	// controller's name and the source of its Events end in "/Provider".
	// Empty (one provider): upstream's names.
	Provider string
}

// Controller is a manager.Runnable that runs only on the leader.
type Controller struct {
	client client.Client
	// nodes lists the cache's own nodes: nothing here modifies them (the
	// provider gets them as upstream's does, from its lister; a delete or
	// patch copies first), and a copy every period is garbage every period.
	nodes    cachednodes.Lister
	recorder record.EventRecorder
	opts     Options
}

// Setup adds the controller to mgr.
func Setup(mgr manager.Manager, opts Options) error {
	if opts.Instances == nil {
		return errors.New("cloud-node-lifecycle-controller needs a provider with InstancesV2")
	}
	if opts.MonitorPeriod <= 0 {
		opts.MonitorPeriod = 5 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	source := EventSource
	if opts.Provider != "" {
		source += "/" + opts.Provider
	}
	c := &Controller{
		client:   mgr.GetClient(),
		nodes:    cachednodes.FromCache(mgr.GetCache()),
		recorder: mgr.GetEventRecorderFor(source), //nolint:staticcheck // core/v1 Events, as upstream writes them
		opts:     opts,
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("setting up %s: %w", Name, err)
	}
	return nil
}

// Start implements manager.Runnable.
func (c *Controller) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, c.monitor, c.opts.MonitorPeriod)
	return nil
}

func isReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasShutdownTaint(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == ShutdownTaint.Key && t.Effect == ShutdownTaint.Effect
	})
}

func (c *Controller) monitor(ctx context.Context) {
	log := klog.FromContext(ctx).WithName(Name)
	if c.opts.Provider != "" {
		log = log.WithValues("provider", c.opts.Provider)
	}
	start := time.Now()
	nodes, err := c.nodes(ctx)
	if err != nil {
		log.Error(err, "Listing nodes")
		return
	}
	defer func() { monitorDuration.Observe(time.Since(start).Seconds()) }()
	var notReady []*corev1.Node
	for _, node := range nodes {
		if !c.opts.Platforms.Owns(node) {
			continue
		}
		if !isReady(node) {
			notReady = append(notReady, node)
			continue
		}
		if hasShutdownTaint(node) {
			if err := c.setShutdownTaint(ctx, node, false); err != nil {
				log.Error(err, "Removing shutdown taint", "node", klog.KObj(node))
			}
		}
	}
	if len(notReady) == 0 {
		return
	}
	statuses := c.liveness(ctx, notReady)
	var deleted atomic.Int64
	workqueue.ParallelizeUntil(ctx, c.opts.Workers, len(notReady), func(i int) {
		node, st := notReady[i], statuses[i]
		switch {
		case st.Err != nil:
			log.Error(st.Err, "Checking whether node's instance exists; leaving the node alone", "node", klog.KObj(node))
		case !st.Exists:
			if c.deleteNode(ctx, node) {
				deleted.Add(1)
			}
		case st.Shutdown && !hasShutdownTaint(node):
			if err := c.setShutdownTaint(ctx, node, true); err != nil {
				log.Error(err, "Adding shutdown taint", "node", klog.KObj(node))
			}
		}
	})
	log.V(4).Info("Monitored nodes", "nodes", len(nodes), "notReady", len(notReady), "deleted", deleted.Load())
}

// liveness asks whether each node's instance exists and, if so, whether it
// is shut down: in batch calls when the provider offers them, and otherwise
// with the same per-node calls upstream makes, counting each in
// cloud_provider_calls_total as upstream does. A batch answer counts as the
// calls it replaces, so the metric reads the same either way.
func (c *Controller) liveness(ctx context.Context, nodes []*corev1.Node) []provider.InstanceStatus {
	// A periodic pass: initializing nodes goes first when the cloud's
	// rate is short.
	ctx = cloud.Background(ctx)
	if c.opts.Instances.SupportsBatch() {
		statuses := c.opts.Instances.Lookup(ctx, nodes, cloud.NeedLiveness)
		for _, st := range statuses {
			switch {
			case st.Err != nil:
				observeCall(opInstanceExists, st.Err)
			case !st.Exists:
				observeCall(opInstanceExists, cloudprovider.InstanceNotFound)
			default:
				observeCall(opInstanceExists, nil)
				observeCall(opInstanceShutdown, nil)
			}
		}
		return statuses
	}
	// Until a node is answered it reads as "could not tell", never as gone,
	// so a pass cut short by ctx cannot get a node deleted.
	out := make([]provider.InstanceStatus, len(nodes))
	for i := range out {
		out[i] = provider.InstanceStatus{Exists: true, Err: errNotAsked}
	}
	workqueue.ParallelizeUntil(ctx, c.opts.Workers, len(nodes), func(i int) {
		exists, err := c.opts.Instances.InstanceExists(ctx, nodes[i])
		if err == nil && !exists {
			observeCall(opInstanceExists, cloudprovider.InstanceNotFound)
		} else {
			observeCall(opInstanceExists, err)
		}
		switch {
		case err != nil:
			out[i] = provider.InstanceStatus{Exists: true, Err: err}
			return
		case !exists:
			out[i] = provider.InstanceStatus{Exists: false}
			return
		}
		shutdown, err := c.opts.Instances.InstanceShutdown(ctx, nodes[i])
		observeCall(opInstanceShutdown, err)
		out[i] = provider.InstanceStatus{Exists: true, Shutdown: shutdown, Err: err}
	})
	return out
}

var errNotAsked = errors.New("the pass ended before this node was asked about")

// nodeRef is the reference upstream's Events carry: no namespace, no
// resourceVersion.
func nodeRef(node *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
}

func (c *Controller) deleteNode(ctx context.Context, node *corev1.Node) bool {
	log := klog.FromContext(ctx)
	log.V(2).Info("Deleting node: its instance no longer exists in the cloud", "node", klog.KObj(node))
	c.recorder.Eventf(nodeRef(node), corev1.EventTypeNormal, ReasonDeletingNode,
		"Deleting node %s because it does not exist in the cloud provider", node.Name)
	// The UID precondition keeps a node re-registered under the same name
	// since the lookup from being deleted in its place.
	err := c.client.Delete(ctx, node.DeepCopy(), client.Preconditions{UID: &node.UID})
	if err == nil || apierrors.IsNotFound(err) {
		return true
	}
	log.Error(err, "Deleting node", "node", klog.KObj(node))
	c.recorder.Eventf(nodeRef(node), corev1.EventTypeWarning, ReasonDeletingNodeFailed, "Failed deleting node %s: %v", node.Name, err)
	return false
}

// setShutdownTaint adds or removes the shutdown taint. The optimistic lock
// keeps this patch of the whole taint list from dropping a taint someone
// else added meanwhile; a conflict is retried next period.
func (c *Controller) setShutdownTaint(ctx context.Context, node *corev1.Node, on bool) error {
	updated := node.DeepCopy()
	updated.Spec.Taints = slices.DeleteFunc(updated.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == ShutdownTaint.Key && t.Effect == ShutdownTaint.Effect
	})
	if on {
		now := metav1.Now()
		t := ShutdownTaint
		t.TimeAdded = &now
		updated.Spec.Taints = append(updated.Spec.Taints, t)
	}
	err := c.client.Patch(ctx, updated, client.MergeFromWithOptions(node, client.MergeFromWithOptimisticLock{}))
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: no taint to set or remove
		}
		return fmt.Errorf("patching taints of node %s: %w", node.Name, err)
	}
	return nil
}
