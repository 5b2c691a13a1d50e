package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// StartFunc runs a tenant's controllers against its API server (cfg) until
// ctx ends; it returns before only when they fail. cluster is the tenant's
// identity as read before (kube-system's UID).
type StartFunc func(ctx context.Context, t Tenant, cfg *rest.Config, cluster string) error

// Event reasons on a tenant's Secret, in the management cluster.
const (
	// ReasonKubeconfigInvalid: the Secret has no kubeconfig key, or it
	// does not parse.
	ReasonKubeconfigInvalid = "TenantKubeconfigInvalid"
	// ReasonUnreachable: the tenant's API server did not answer, or
	// refused to tell its identity (kube-system).
	ReasonUnreachable = "TenantUnreachable"
	// ReasonDuplicate: another tenant serves the same cluster (same
	// kube-system UID).
	ReasonDuplicate = "TenantDuplicateCluster"
	// ReasonFailed: the tenant's controllers stopped with an error.
	ReasonFailed = "TenantFailed"
	// ReasonStarted: this replica serves the tenant.
	ReasonStarted = "TenantStarted"
)

// failure is why a tenant's run did not go on, with its Event reason.
type failure struct {
	reason string
	err    error
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

func fail(reason string, err error) error { return &failure{reason: reason, err: err} }

// runnerDeps is what a runner needs from its reconciler.
type runnerDeps struct {
	start StartFunc
	// take records that tenant serves cluster, unless another tenant
	// does already, which it names; release undoes take.
	take    func(cluster, tenant string) string
	release func(cluster, tenant string)
	// report is told each failure and each start.
	report func(t Tenant, reason string, err error)
	// identify reads the tenant cluster's identity (readCluster).
	identify   func(context.Context, *rest.Config) (string, error)
	backoff    time.Duration
	maxBackoff time.Duration
}

// runner is one tenant's run on this replica: connect, check, start its
// controllers, and after a failure again, with exponential backoff. It never
// gives up: a tenant waits until what is wrong is fixed or it goes away.
type runner struct {
	tenant Tenant
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// cluster is the tenant's identity once read.
	cluster string
	// running: its controllers run (not connecting or waiting).
	running bool
	// failure is the last failure, while the run waits to retry (Status).
	failure lastFailure
}

// status is the run's state for Status.
func (r *runner) status() runState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return runState{cluster: r.cluster, running: r.running, failure: r.failure}
}

// serving is the cluster the tenant's controllers serve now, "" while they
// do not run.
func (r *runner) serving() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return ""
	}
	return r.cluster
}

func startRunner(ctx context.Context, t Tenant, deps runnerDeps) *runner {
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{tenant: t, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.loop(ctx, deps)
	}()
	return r
}

// stop stops the run and waits until its controllers have stopped, so that
// its Lease is released only once nothing of it acts.
func (r *runner) stop() {
	r.cancel()
	<-r.done
}

func (r *runner) state() (cluster string, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cluster, r.running
}

func (r *runner) loop(ctx context.Context, deps runnerDeps) {
	log := klog.FromContext(ctx).WithValues("tenant", r.tenant.Name)
	ctx = klog.NewContext(ctx, log)
	wait := deps.backoff
	for {
		began := time.Now()
		err := r.once(ctx, deps)
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("its controllers stopped")
		}
		reason := ReasonFailed
		var f *failure
		if errors.As(err, &f) {
			reason = f.reason
		}
		// A run that lasted longer than the longest wait failed anew,
		// not again: start the backoff over.
		if time.Since(began) > deps.maxBackoff {
			wait = deps.backoff
		}
		log.Error(err, "Tenant not served; retrying", "source", r.tenant.Source(), "reason", reason, "retryIn", wait)
		r.mu.Lock()
		r.failure = lastFailure{reason: reason, message: err.Error(), at: time.Now()}
		r.mu.Unlock()
		deps.report(r.tenant, reason, err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, deps.maxBackoff)
	}
}

// once connects to the tenant and runs its controllers until ctx ends or
// they fail.
func (r *runner) once(ctx context.Context, deps runnerDeps) error {
	if len(r.tenant.Kubeconfig) == 0 {
		return fail(ReasonKubeconfigInvalid, fmt.Errorf("%s has no %q key", r.tenant.Source(), KeyKubeconfig))
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(r.tenant.Kubeconfig)
	if err != nil {
		return fail(ReasonKubeconfigInvalid, fmt.Errorf("the kubeconfig of %s: %w", r.tenant.Source(), err))
	}
	cluster, err := deps.identify(ctx, cfg)
	if err != nil {
		return fail(ReasonUnreachable, fmt.Errorf("reading the cluster identity of tenant %s at %s: %w", r.tenant.Name, cfg.Host, err))
	}
	r.mu.Lock()
	r.cluster = cluster
	r.mu.Unlock()
	if other := deps.take(cluster, r.tenant.Name); other != "" {
		return fail(ReasonDuplicate, fmt.Errorf("tenant %s names cluster %s, which tenant %s already serves: remove one of them", r.tenant.Name, cluster, other))
	}
	defer deps.release(cluster, r.tenant.Name)
	r.mu.Lock()
	r.running = true
	r.failure = lastFailure{}
	r.mu.Unlock()
	klog.FromContext(ctx).Info("Serving tenant", "source", r.tenant.Source(), "cluster", cluster, "host", cfg.Host)
	deps.report(r.tenant, ReasonStarted, nil)
	return deps.start(ctx, r.tenant, cfg, cluster)
}

// readCluster reads the tenant cluster's identity: its kube-system UID, and
// for a restored copy (the outrigger.dev/cluster-copy annotation) the copy's
// name after it, as the manager tells clusters apart.
func readCluster(ctx context.Context, cfg *rest.Config, timeout time.Duration) (string, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ns, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	id := string(ns.UID)
	if c := ns.Annotations["outrigger.dev/cluster-copy"]; c != "" {
		id += "/" + c
	}
	return id, nil
}
