package manager

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// clusterIDNamespace is the namespace whose UID identifies the cluster:
// every cluster has one, its UID is set by the API server when the cluster
// is made and never changes, and nobody configures it (OpenTelemetry's
// k8s.cluster.uid is defined the same way).
const clusterIDNamespace = "kube-system"

// clusterIdentity is the cluster's identity (provider.ClusterIdentity),
// read once, by the leader, before any provider is initialized. What the
// providers record with it in the cloud tells this cluster's load
// balancers and routes from those of every other cluster, also one left
// at the same --cluster-name.
type clusterIdentity struct {
	config *rest.Config
	// mu makes the providers of one Outrigger wait for one read.
	mu sync.Mutex
	id atomic.Pointer[string]
}

// resolve reads the identity, retrying with backoff until it is read or
// ctx ends. A refusal (RBAC written for the upstream CCM, which never reads
// it) is an answer, not an outage: Outrigger runs without an identity, as
// the upstream CCM does, and deletes no load balancer whose Service is
// gone (the orphan sweep needs the identity); it says so once.
func (c *clusterIdentity) resolve(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id := c.id.Load(); id != nil {
		return *id, nil
	}
	client, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return "", fmt.Errorf("client for the cluster's identity: %w", err)
	}
	log := klog.FromContext(ctx)
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		ns, err := client.CoreV1().Namespaces().Get(ctx, clusterIDNamespace, metav1.GetOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			log.Error(err, "Cannot read the cluster's identity: running without it, as the upstream CCM; load balancers whose Service is gone are not deleted, and a provider tells this cluster's cloud objects apart by --cluster-name alone. Grant get on namespaces/kube-system and restart to have it")
			none := ""
			c.id.Store(&none)
			return true, nil
		}
		if err != nil {
			log.Error(err, "Reading the cluster's identity (the UID of namespace kube-system; needs get on namespaces/kube-system); retrying")
			return false, nil
		}
		id := string(ns.UID)
		c.id.Store(&id)
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("reading the cluster's identity (namespace %s): %w", clusterIDNamespace, err)
	}
	if id := c.get(); id != "" {
		log.Info("Cluster identity", "clusterID", id)
	}
	return c.get(), nil
}

// get returns the identity once resolved, "" before.
func (c *clusterIdentity) get() string {
	if id := c.id.Load(); id != nil {
		return *id
	}
	return ""
}
