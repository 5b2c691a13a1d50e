package cloud

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
)

// BatchInstances is an optional interface for a provider's InstancesV2
// value: it answers for many nodes in one cloud API call. Outrigger uses it
// for initialization, the periodic address refresh and the lifecycle check,
// so a cluster of thousands of nodes costs a handful of cloud calls per
// period rather than one per node. A provider that does not implement it is
// called node by node through InstancesV2.
type BatchInstances interface {
	// InstancesStatus returns one status per node, in the order given. An
	// error for the whole call (throttling, an outage) is returned as err;
	// a problem with one node only is that node's InstanceStatus.Err.
	InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]InstanceStatus, error)
}

// InstanceStatus is what the cloud knows of one node's instance.
type InstanceStatus struct {
	// Exists is false only when the cloud positively reports the instance
	// gone (terminated or unknown). Never false because of an error.
	Exists bool
	// Shutdown is true when the instance exists but is stopped.
	Shutdown bool
	// Metadata is set when Exists (and the lookup asked for metadata).
	Metadata *cloudprovider.InstanceMetadata
	// Err is set when the cloud could not tell for this node.
	Err error
}

// MaxBatch is the most nodes Lookup hands a provider in one batch call.
const MaxBatch = 500

// Instances is the provider's InstancesV2 behind the layer. It implements
// cloudprovider.InstancesV2 itself, so code written for the standard
// interface works unchanged.
type Instances struct {
	layer *Layer
	inner cloudprovider.InstancesV2
	batch BatchInstances
}

// Instances returns the provider's instances interface, or false when the
// provider has none. A provider with only the older Instances interface is
// adapted to InstancesV2.
func (l *Layer) Instances() (*Instances, bool) {
	v2, ok := l.provider.InstancesV2()
	if !ok || v2 == nil {
		v1, ok := l.provider.Instances()
		if !ok || v1 == nil {
			return nil, false
		}
		zones, ok := l.provider.Zones()
		if !ok {
			zones = nil
		}
		v2 = instancesV1{provider: l.provider, instances: v1, zones: zones}
	}
	batch, _ := v2.(BatchInstances)
	if l.opts.NoBatch {
		batch = nil
	}
	return &Instances{layer: l, inner: v2, batch: batch}, true
}

// SupportsBatch reports whether the provider answers many nodes per call.
func (i *Instances) SupportsBatch() bool { return i.batch != nil }

// InstanceExists implements cloudprovider.InstancesV2.
func (i *Instances) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	return do(ctx, i.layer, call{"InstanceExists", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (bool, error) {
		return i.inner.InstanceExists(ctx, node)
	})
}

// InstanceShutdown implements cloudprovider.InstancesV2.
func (i *Instances) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	return do(ctx, i.layer, call{"InstanceShutdown", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (bool, error) {
		return i.inner.InstanceShutdown(ctx, node)
	})
}

// InstanceMetadata implements cloudprovider.InstancesV2.
func (i *Instances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return do(ctx, i.layer, call{"InstanceMetadata", FamilyInstances, nodeKey(node)}, func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) {
		return i.inner.InstanceMetadata(ctx, node)
	})
}

// InstancesStatus calls the provider's batch lookup for at most MaxBatch
// nodes. It must only be called when SupportsBatch.
func (i *Instances) InstancesStatus(ctx context.Context, nodes []*corev1.Node) ([]InstanceStatus, error) {
	if i.batch == nil {
		return nil, cloudprovider.NotImplemented
	}
	out, err := do(ctx, i.layer, call{"InstancesStatus", FamilyInstances, ""}, func(ctx context.Context) ([]InstanceStatus, error) {
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

// Lookup answers for every node, in order, with batch calls of at most
// MaxBatch nodes when the provider offers them and otherwise with per-node
// calls, at most concurrency at a time. A failed batch marks every node in it
// with the batch's error; nodes are never reported gone because of an error.
func (i *Instances) Lookup(ctx context.Context, nodes []*corev1.Node, need Need, concurrency int) []InstanceStatus {
	// Until a node is answered it reads as "could not tell", never as gone,
	// so a lookup cut short by ctx cannot get a node deleted.
	out := make([]InstanceStatus, len(nodes))
	for j := range out {
		out[j] = InstanceStatus{Exists: true, Err: errNotAnswered}
	}
	if i.batch != nil {
		chunks := (len(nodes) + MaxBatch - 1) / MaxBatch
		workqueue.ParallelizeUntil(ctx, max(1, concurrency), chunks, func(c int) {
			lo, hi := c*MaxBatch, min(len(nodes), (c+1)*MaxBatch)
			res, err := i.InstancesStatus(ctx, nodes[lo:hi])
			for j := lo; j < hi; j++ {
				if err != nil {
					out[j] = InstanceStatus{Exists: true, Err: err}
				} else {
					out[j] = res[j-lo]
				}
			}
		})
		return out
	}
	workqueue.ParallelizeUntil(ctx, max(1, concurrency), len(nodes), func(j int) {
		out[j] = i.lookupOne(ctx, nodes[j], need)
	})
	return out
}

func (i *Instances) lookupOne(ctx context.Context, node *corev1.Node, need Need) InstanceStatus {
	if need == NeedMetadata {
		md, err := i.InstanceMetadata(ctx, node)
		switch {
		case errors.Is(err, cloudprovider.InstanceNotFound):
			return InstanceStatus{Exists: false}
		case err != nil:
			return InstanceStatus{Exists: true, Err: err}
		}
		return InstanceStatus{Exists: true, Metadata: md}
	}
	exists, err := i.InstanceExists(ctx, node)
	if err != nil {
		return InstanceStatus{Exists: true, Err: err}
	}
	if !exists {
		return InstanceStatus{Exists: false}
	}
	shutdown, err := i.InstanceShutdown(ctx, node)
	if err != nil {
		return InstanceStatus{Exists: true, Err: err}
	}
	return InstanceStatus{Exists: true, Shutdown: shutdown}
}

var errNotAnswered = errors.New("lookup ended before this node was answered")

// nodeKey is the object key of a per-node instance call.
func nodeKey(node *corev1.Node) string { return "instance/" + node.Name }
