package manager

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// clusterIDNamespace is the namespace whose UID identifies the cluster:
// every cluster has one, its UID is set by the API server when the cluster
// is made and never changes, and nobody configures it (OpenTelemetry's
// k8s.cluster.uid is defined the same way).
const clusterIDNamespace = "kube-system"

// AnnotationClusterCopy on the kube-system namespace marks a control plane
// restored from an etcd snapshot of another that may still run (a disaster
// recovery drill): such a copy shares every UID with its original, the
// kube-system namespace's too, so without the mark both would claim the
// same load balancers and routes. Its value, any name the operator picks
// for the copy, makes a different identity (ClusterIdentityFor). Removing
// it (and restarting Outrigger) makes the copy the original again, when it
// takes over for good.
const AnnotationClusterCopy = "outrigger.dev/cluster-copy"

// Event reasons of the cluster's identity, on the leader-election Lease
// (there is no object it belongs to; `kubectl describe lease` shows them).
const (
	ReasonClusterIdentityUnavailable = "ClusterIdentityUnavailable"
	ReasonClusterIdentityRead        = "ClusterIdentityRead"
)

// ClusterIdentityFor is the identity of the cluster whose kube-system
// namespace has uid and, for a copy (AnnotationClusterCopy), the copy's
// name: the UID itself, or for a copy a name-based UUID (version 5) of the
// copy's name under the UID. A UUID again, so that it fits wherever a
// provider records a UID, and stable, so that the copy keeps its identity
// over restarts.
func ClusterIdentityFor(uid, copyName string) string {
	if copyName == "" {
		return uid
	}
	space, err := uuid.Parse(uid)
	if err != nil {
		// Not a UUID (the API server makes one): still a stable and
		// distinct identity.
		return uuid.NewSHA1(uuid.Nil, []byte(uid+"/"+copyName)).String()
	}
	return uuid.NewSHA1(space, []byte(copyName)).String()
}

var (
	// clusterIdentityUnavailable is 1 while this Outrigger runs without
	// the cluster's identity after a lasting refusal; by tenant, as the
	// reads are (tenant mode: one per tenant cluster; "" for a single
	// cluster).
	clusterIdentityUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "outrigger_cluster_identity_unavailable",
		Help: "1 while Outrigger runs without the cluster's identity (reading the kube-system namespace refused for longer than the leader-election lease duration): load balancers and routes made meanwhile carry none, and the orphan sweep deletes nothing. By tenant.",
	}, []string{"tenant"})
	// clusterIdentityReadsTotal counts reads of the identity by result.
	clusterIdentityReadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outrigger_cluster_identity_reads_total",
		Help: "Reads of the cluster's identity (the kube-system namespace) by result: read; refused (Forbidden or Unauthorized); failed (any other error).",
	}, []string{"tenant", "result"})
)

func init() {
	metrics.Registry.MustRegister(clusterIdentityUnavailable, clusterIdentityReadsTotal)
}

// clusterIdentity is the cluster's identity (provider.ClusterIdentity),
// read by the leader before any provider is initialized. What the
// providers record with it in the cloud tells this cluster's load
// balancers and routes from those of every other cluster, also one left
// at the same --cluster-name.
//
// It is read with backoff for as long as it takes: an outage, a timeout, an
// API server restarting are waited out, since a load balancer made
// meanwhile would carry no identity for the rest of its life. A refusal
// (Forbidden, Unauthorized) lasting longer than refusalLimit (the
// leader-election lease duration: longer than an API server restart or an
// RBAC cache sync) is an answer instead, RBAC written for the upstream CCM,
// which never reads it: Outrigger then runs without an identity, as the
// upstream CCM does, says so in an Event and a metric, and keeps reading.
// Once it reads the identity, the providers are given it and tag what they
// make from then on, and the orphan sweep, which reads get, starts
// deleting.
type clusterIdentity struct {
	// tenant labels its metrics (tenant mode; "" for a single cluster).
	tenant       string
	client       kubernetes.Interface
	refusalLimit time.Duration
	recorder     record.EventRecorder
	lease        *corev1.ObjectReference
	// backoff is the first delay between reads, doubled up to maxBackoff.
	backoff, maxBackoff time.Duration

	// settled is closed once the identity is read or Outrigger runs
	// without it: providers are initialized after.
	settled     chan struct{}
	settledOnce sync.Once

	mu          sync.Mutex
	id          string
	subscribers []func(string)
}

// addClusterIdentity makes the identity reader and adds it to mgr, where it
// runs once leading.
func addClusterIdentity(mgr manager.Manager, cfg *rest.Config, opts *Options) (*clusterIdentity, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for the cluster's identity: %w", err)
	}
	c := newClusterIdentity(client, opts.LeaderElectLeaseDuration,
		mgr.GetEventRecorderFor("cloud-controller-manager"), //nolint:staticcheck // core/v1 Events, as upstream writes them
		&corev1.ObjectReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease",
			Namespace: opts.LeaderElectResourceNamespace, Name: opts.LeaderElectResourceName})
	c.tenant = opts.tenantName()
	return c, mgr.Add(c)
}

func newClusterIdentity(client kubernetes.Interface, refusalLimit time.Duration, recorder record.EventRecorder, lease *corev1.ObjectReference) *clusterIdentity {
	return &clusterIdentity{client: client, refusalLimit: refusalLimit, recorder: recorder, lease: lease,
		backoff: 200 * time.Millisecond, maxBackoff: 30 * time.Second, settled: make(chan struct{})}
}

func (c *clusterIdentity) NeedLeaderElection() bool { return true }

// Start reads the identity until it has it or ctx ends.
func (c *clusterIdentity) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("namespace", clusterIDNamespace)
	delay := c.backoff
	var refusedSince time.Time
	for {
		id, err := c.read(ctx)
		switch {
		case err == nil:
			clusterIdentityReadsTotal.WithLabelValues(c.tenant, "read").Inc()
			c.found(ctx, id)
			return nil
		case ctx.Err() != nil:
			return nil
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			clusterIdentityReadsTotal.WithLabelValues(c.tenant, "refused").Inc()
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if refused := time.Since(refusedSince); refused >= c.refusalLimit && !c.isSettled() {
				c.unavailable(ctx, err, refused)
			} else {
				log.Error(err, "Reading the cluster's identity refused (needs get on namespaces/kube-system); retrying", "refusedFor", time.Since(refusedSince).Round(time.Millisecond), "limit", c.refusalLimit)
			}
		default:
			// Only a refusal that lasts is an answer: any other error
			// starts the count again.
			clusterIdentityReadsTotal.WithLabelValues(c.tenant, "failed").Inc()
			refusedSince = time.Time{}
			log.Error(err, "Reading the cluster's identity; retrying")
		}
		// Jitter keeps the replicas of many clusters behind one
		// authentication webhook from retrying in step.
		wait := delay/2 + rand.N(delay/2+1)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		delay = min(2*delay, c.maxBackoff)
	}
}

// read returns the identity: the UID of kube-system, or its copy's.
func (c *clusterIdentity) read(ctx context.Context) (string, error) {
	ns, err := c.client.CoreV1().Namespaces().Get(ctx, clusterIDNamespace, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ClusterIdentityFor(string(ns.UID), ns.Annotations[AnnotationClusterCopy]), nil
}

// found records the identity and hands it to every provider.
func (c *clusterIdentity) found(ctx context.Context, id string) {
	log := klog.FromContext(ctx)
	c.mu.Lock()
	c.id = id
	subscribers := c.subscribers
	c.subscribers = nil
	c.mu.Unlock()
	for _, set := range subscribers {
		set(id)
	}
	log.Info("Cluster identity", "clusterID", id)
	if c.isSettled() {
		clusterIdentityUnavailable.WithLabelValues(c.tenant).Set(0)
		c.recorder.Eventf(c.lease, corev1.EventTypeNormal, ReasonClusterIdentityRead,
			"Read the cluster's identity %s: load balancers and routes made from now on carry it, and the orphan sweep deletes again", id)
	}
	c.settle()
}

// unavailable enters the documented no-identity mode.
func (c *clusterIdentity) unavailable(ctx context.Context, err error, refused time.Duration) {
	klog.FromContext(ctx).Error(err, "Cannot read the cluster's identity: running without it, as the upstream CCM, and reading it again with backoff; until then load balancers and routes made carry no identity and load balancers whose Service is gone are not deleted. Grant get on namespaces/kube-system",
		"refusedFor", refused.Round(time.Millisecond))
	clusterIdentityUnavailable.WithLabelValues(c.tenant).Set(1)
	c.recorder.Eventf(c.lease, corev1.EventTypeWarning, ReasonClusterIdentityUnavailable,
		"Reading namespace %s refused for %s (longer than the lease duration %s): running without the cluster's identity until it can be read; load balancers and routes made meanwhile carry none, and the orphan sweep deletes nothing. Grant get on namespaces/%s: %v",
		clusterIDNamespace, refused.Round(time.Second), c.refusalLimit, clusterIDNamespace, err)
	c.settle()
}

func (c *clusterIdentity) settle() { c.settledOnce.Do(func() { close(c.settled) }) }

func (c *clusterIdentity) isSettled() bool {
	select {
	case <-c.settled:
		return true
	default:
		return false
	}
}

// wait returns once the identity is read or Outrigger runs without it,
// or with ctx's error.
func (c *clusterIdentity) wait(ctx context.Context) error {
	select {
	case <-c.settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// subscribe has set called with the identity: now if it is known, else
// once it is read. A provider's SetClusterID, so that a provider started
// without the identity tags what it makes once it is read.
func (c *clusterIdentity) subscribe(set func(string)) {
	c.mu.Lock()
	id := c.id
	if id == "" {
		c.subscribers = append(c.subscribers, set)
	}
	c.mu.Unlock()
	if id != "" {
		set(id)
	}
}

// get returns the identity once read, "" before: a live value, for the
// controllers that read it on every use (the orphan sweep, the gateway
// controller's records).
func (c *clusterIdentity) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}
