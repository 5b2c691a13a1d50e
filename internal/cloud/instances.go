package cloud

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/admission"
	"github.com/outrigger-ccm/outrigger/internal/cloud/internal/sharing"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Instances is the provider's InstancesV2 behind the layer. It implements
// cloudprovider.InstancesV2 itself, so code written for the standard
// interface works unchanged.
type Instances struct {
	layer   *Layer
	inner   cloudprovider.InstancesV2
	batch   provider.BatchInstances
	answers *sharing.Answers
	// batcher gathers concurrent InstanceMetadata calls into batch calls
	// (nil without a batch lookup).
	batcher *sharing.Batcher
	// answered is the layer's, nil without Options.RefreshPeriod.
	answered *sharing.Answered
}

// Instances returns the provider's instances interface, or false when the
// provider has none. A provider with only the older Instances interface is
// adapted to InstancesV2.
func (l *Layer) Instances() (*Instances, bool) {
	v2, ok := provider.InstancesV2(l.provider)
	if !ok {
		return nil, false
	}
	batch, _ := v2.(provider.BatchInstances)
	if l.opts.NoBatch {
		batch = nil
	}
	i := &Instances{layer: l, inner: v2, batch: batch, answers: l.answers, answered: l.answered}
	if batch != nil {
		i.batcher = sharing.NewBatcher(func(ctx context.Context, nodes []*corev1.Node) []provider.InstanceStatus {
			return i.lookup(ctx, nodes, NeedMetadata)
		}, l.opts.BatchWindow)
	}
	return i, true
}

// ProviderIDOptional reports whether the provider may leave a node without a
// provider ID (see provider.ProviderIDOptional).
func (i *Instances) ProviderIDOptional() bool { return provider.ProviderIDOptional(i.inner) }

// SupportsBatch reports whether the provider answers many nodes per call.
func (i *Instances) SupportsBatch() bool { return i.batch != nil }

// ownCopy: a call the layer gives up on at its deadline may go on running
// in the provider, while its caller, released, changes its object (a node
// it patches, a Service whose status it writes). So a provider gets its own
// copy of the one object a call is about. Node lists (backends, batch
// lookups) are the informer cache's objects, which nobody changes in place.

// InstanceExists implements cloudprovider.InstancesV2. Answers are shared
// between callers within Options.ShareWindow (see sharing.Answers).
func (i *Instances) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	return sharing.Ask(ctx, i.answers, node, sharing.Exists, func(exists bool, err error) bool { return err == nil && exists }, func() (bool, error) {
		own := node.DeepCopy() // see ownCopy
		return do(ctx, i.layer, call{"InstanceExists", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (bool, error) {
			return i.inner.InstanceExists(ctx, own)
		})
	})
}

// InstanceShutdown implements cloudprovider.InstancesV2, its answers shared
// as InstanceExists's.
func (i *Instances) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	return sharing.Ask(ctx, i.answers, node, sharing.Shutdown, func(_ bool, err error) bool { return err == nil }, func() (bool, error) {
		own := node.DeepCopy() // see ownCopy
		return do(ctx, i.layer, call{"InstanceShutdown", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (bool, error) {
			return i.inner.InstanceShutdown(ctx, own)
		})
	})
}

// InstanceMetadata implements cloudprovider.InstancesV2, its answers shared
// as InstanceExists's. With a provider that answers in batches, the calls
// made at about the same time (within Options.BatchWindow) share one batch
// call. An answer to a call not marked Background (a node's
// initialization) also answers the address refresh's lookups of the node
// within Options.RefreshPeriod.
func (i *Instances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	md, err := i.instanceMetadata(ctx, node)
	if err == nil && md != nil && i.answered != nil && !admission.IsBackground(ctx) {
		i.answered.Record(node.Name, i.layer.opts.Clock.Now(), md)
	}
	return md, err
}

func (i *Instances) instanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return sharing.Ask(ctx, i.answers, node, sharing.Metadata, func(md *cloudprovider.InstanceMetadata, err error) bool { return err == nil && md != nil }, func() (*cloudprovider.InstanceMetadata, error) {
		if i.batcher != nil {
			st := i.batcher.Lookup(ctx, node)
			switch {
			case st.Err != nil:
				return nil, st.Err
			case !st.Exists || st.Metadata == nil:
				return nil, cloudprovider.InstanceNotFound
			}
			return st.Metadata, nil
		}
		own := node.DeepCopy() // see ownCopy
		return do(ctx, i.layer, call{"InstanceMetadata", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) {
			return i.inner.InstanceMetadata(ctx, own)
		})
	})
}

// InstancesStatus calls the provider's batch lookup for at most provider.MaxBatch
// nodes. It must only be called when SupportsBatch.
func (i *Instances) InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]provider.InstanceStatus, error) {
	if i.batch == nil {
		return nil, cloudprovider.NotImplemented
	}
	out, err := do(ctx, i.layer, call{"InstancesStatus", FamilyInstances, ""}, func(ctx context.Context) ([]provider.InstanceStatus, error) {
		return i.batch.InstancesStatus(ctx, nodes)
	})
	if err == nil && len(out) != len(nodes) {
		return nil, fmt.Errorf("provider answered InstancesStatus for %d nodes with %d statuses", len(nodes), len(out))
	}
	return out, err
}

// Need says which facts a Lookup must establish when it falls back to
// per-node calls (a batch call answers all of them at once).
type Need int

const (
	// NeedMetadata asks for InstanceMetadata only (initialization and the
	// address refresh): one call per node.
	NeedMetadata Need = iota
	// NeedLiveness asks whether the instance exists and, if so, whether it is
	// shut down (the lifecycle check): one or two calls per node.
	NeedLiveness
)

// lookupParallelism is how many batch or per-node calls one Lookup has
// waiting for the layer at once: the method family's adaptive limits decide
// how many of them are in flight.
const lookupParallelism = 256

// Lookup answers for every node, in order, with batch calls of at most
// provider.MaxBatch nodes when the provider offers them and otherwise with
// per-node calls. A failed batch marks every node in it with the batch's
// error; nodes are never reported gone because of an error. A Background
// lookup of metadata (the address refresh) is answered without a call for
// the nodes whose initialization got theirs within Options.RefreshPeriod.
func (i *Instances) Lookup(ctx context.Context, nodes []*corev1.Node, need Need) []provider.InstanceStatus {
	if need != NeedMetadata || i.answered == nil || !admission.IsBackground(ctx) {
		return i.lookup(ctx, nodes, need)
	}
	period, now := i.layer.opts.RefreshPeriod, i.layer.opts.Clock.Now()
	i.layer.pruneAnswered(now)
	out := make([]provider.InstanceStatus, len(nodes))
	var ask []*corev1.Node
	var at []int
	for j, n := range nodes {
		if md, ok := i.answered.Fresh(n.Name, now, period); ok {
			out[j] = provider.InstanceStatus{Exists: true, Metadata: md}
			continue
		}
		ask, at = append(ask, n), append(at, j)
	}
	if served := len(nodes) - len(ask); served > 0 {
		klog.FromContext(ctx).V(4).Info("Nodes initialized within the refresh period answered from their initialization", "nodes", served)
	}
	if len(ask) == 0 {
		return out
	}
	for k, st := range i.lookup(ctx, ask, need) {
		out[at[k]] = st
	}
	return out
}

func (i *Instances) lookup(ctx context.Context, nodes []*corev1.Node, need Need) []provider.InstanceStatus {
	// Until a node is answered it reads as "could not tell", never as gone,
	// so a lookup cut short by ctx cannot get a node deleted.
	out := make([]provider.InstanceStatus, len(nodes))
	for j := range out {
		out[j] = provider.InstanceStatus{Exists: true, Err: errNotAnswered}
	}
	if i.batch != nil {
		chunks := (len(nodes) + provider.MaxBatch - 1) / provider.MaxBatch
		workqueue.ParallelizeUntil(ctx, lookupParallelism, chunks, func(c int) {
			lo, hi := c*provider.MaxBatch, min(len(nodes), (c+1)*provider.MaxBatch)
			res, err := i.InstancesStatus(ctx, nodes[lo:hi])
			for j := lo; j < hi; j++ {
				if err != nil {
					out[j] = provider.InstanceStatus{Exists: true, Err: err}
				} else {
					out[j] = res[j-lo]
				}
			}
			if err == nil {
				i.answers.RecordStatuses(nodes[lo:hi], res)
			}
		})
		return out
	}
	if len(nodes) == 1 {
		// The periodic passes ask one node at a time: no goroutine of its
		// own for it.
		out[0] = i.lookupOne(ctx, nodes[0], need)
		return out
	}
	workqueue.ParallelizeUntil(ctx, lookupParallelism, len(nodes), func(j int) {
		out[j] = i.lookupOne(ctx, nodes[j], need)
	})
	return out
}

func (i *Instances) lookupOne(ctx context.Context, node *corev1.Node, need Need) provider.InstanceStatus {
	if need == NeedMetadata {
		md, err := i.InstanceMetadata(ctx, node)
		switch {
		case errors.Is(err, cloudprovider.InstanceNotFound):
			return provider.InstanceStatus{Exists: false}
		case err != nil:
			return provider.InstanceStatus{Exists: true, Err: err}
		}
		return provider.InstanceStatus{Exists: true, Metadata: md}
	}
	exists, err := i.InstanceExists(ctx, node)
	if err != nil {
		return provider.InstanceStatus{Exists: true, Err: err}
	}
	if !exists {
		return provider.InstanceStatus{Exists: false}
	}
	shutdown, err := i.InstanceShutdown(ctx, node)
	if err != nil {
		return provider.InstanceStatus{Exists: true, Err: err}
	}
	return provider.InstanceStatus{Exists: true, Shutdown: shutdown}
}

var errNotAnswered = errors.New("lookup ended before this node was answered")

// nodeKey is the object key of a per-node instance call.
func nodeKey(node *corev1.Node) string { return "instance/" + node.Name }
