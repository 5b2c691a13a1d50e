package manager

import "github.com/outrigger-ccm/outrigger/internal/manager"

// The Event reasons Outrigger's manager records on the leader-election
// Lease (degraded cloud calls, a provider controller that failed, the
// cluster's identity): alerts and `kubectl get events --field-selector
// reason=...` name them.
const (
	ReasonCloudCallsDegraded         = manager.ReasonCloudCallsDegraded
	ReasonCloudCallsRecovered        = manager.ReasonCloudCallsRecovered
	ReasonControllerFailed           = manager.ReasonControllerFailed
	ReasonClusterIdentityUnavailable = manager.ReasonClusterIdentityUnavailable
	ReasonClusterIdentityRead        = manager.ReasonClusterIdentityRead
)

// AnnotationClusterCopy on the kube-system namespace marks a control plane
// restored from an etcd snapshot of another (docs/hybrid.md): its value
// makes the copy's cluster identity differ from the original's.
const AnnotationClusterCopy = manager.AnnotationClusterCopy

// BatchInstanceLookups is Outrigger's own feature gate
// (--feature-gates=BatchInstanceLookups=false asks node by node).
const BatchInstanceLookups = manager.BatchInstanceLookups
