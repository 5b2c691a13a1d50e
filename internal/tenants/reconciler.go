package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// Options configure a Reconciler. The zero value of a field takes the
// default documented on it.
type Options struct {
	// Client reaches the management cluster, where the Secrets and Leases
	// are.
	Client kubernetes.Interface
	// Namespace holds the tenants' Secrets and every Lease (required).
	Namespace string
	// Selector picks the tenants' Secrets in Namespace; nil: no Secrets.
	Selector labels.Selector
	// Dir is a directory of kubeconfig files, one tenant each; "": none.
	Dir string
	// Identity names this replica in the Leases (required, distinct for
	// every replica).
	Identity string
	// LeaseDuration is how long a Lease stays its holder's after its last
	// renewal: how long a dead replica's tenants wait. Default 15s.
	LeaseDuration time.Duration
	// Period is how often the Secrets and Leases are read and the Leases
	// renewed. Default LeaseDuration/5.
	Period time.Duration
	// Slack is how many tenants above its share a replica keeps (see
	// World.Slack). Default 0.
	Slack int
	// Backoff is the first wait after a tenant's run failed, doubled after
	// each failure up to MaxBackoff. Defaults 1s and 5m.
	Backoff, MaxBackoff time.Duration
	// ConnectTimeout bounds reading a tenant's identity. Default 10s.
	ConnectTimeout time.Duration
	// Start runs one tenant's controllers (required).
	Start StartFunc
	// Recorder records Events on the tenants' Secrets. Default: one
	// writing through Client.
	Recorder record.EventRecorder
}

func (o *Options) defaults() error {
	if o.Client == nil || o.Namespace == "" || o.Identity == "" || o.Start == nil {
		return errors.New("tenants: Client, Namespace, Identity and Start are required")
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.Period <= 0 {
		o.Period = o.LeaseDuration / 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	return nil
}

// Reconciler is one replica's share of the tenants: it reads the tenants
// and Leases every Period, decides (Decide), and starts, restarts and stops
// the tenants' runs to match. It is a Runnable: Start blocks until ctx ends,
// then stops every run and releases its Leases.
type Reconciler struct {
	opts   Options
	leases *leases
	now    func() time.Time

	mu sync.Mutex
	// runners are this replica's tenant runs, by tenant.
	runners map[string]*runner
	// renewed is when each held Lease was last renewed: a run whose
	// Lease could not be renewed for a Lease duration stops, since
	// another replica may have taken the tenant meanwhile.
	renewed map[string]time.Time
	// claims are the tenant Leases as last read, for take.
	claims map[string]Claim
	// serving are the clusters this replica's tenants serve, by cluster:
	// a second tenant of the same cluster is refused under the same lock
	// that records the first, so two never both start here.
	serving map[string]string
	// last are the tenants as last read, kept when reading them fails;
	// known is the same under mu, for Status.
	last  []Tenant
	known []Tenant
	// stopping are runs being stopped in the background, by tenant: a
	// tenant's controllers may take a while to stop (its API server
	// down), and the round goes on renewing the other tenants' Leases,
	// and this one's, meanwhile. It is not started again until stopped.
	stopping map[string]*runner
	// stops counts the background stops, for shutdown.
	stops sync.WaitGroup
	// identify reads a tenant cluster's identity; tests replace it.
	identify func(context.Context, *rest.Config) (string, error)
}

// New returns a Reconciler for opts.
func New(opts Options) (*Reconciler, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	r := &Reconciler{opts: opts, now: time.Now, runners: map[string]*runner{}, renewed: map[string]time.Time{}, serving: map[string]string{},
		stopping: map[string]*runner{}}
	r.identify = func(ctx context.Context, cfg *rest.Config) (string, error) {
		return readCluster(ctx, cfg, opts.ConnectTimeout)
	}
	r.leases = &leases{client: opts.Client, namespace: opts.Namespace, self: opts.Identity, duration: opts.LeaseDuration,
		now: func() time.Time { return r.now() }}
	return r, nil
}

// Start runs rounds every Period until ctx ends.
func (r *Reconciler) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithValues("replica", r.opts.Identity)
	ctx = klog.NewContext(ctx, log)
	if r.opts.Recorder == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.opts.Client.CoreV1().Events("")})
		defer b.Shutdown()
		r.opts.Recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "outrigger-tenants"})
	}
	log.Info("Serving tenants", "namespace", r.opts.Namespace, "selector", r.opts.Selector, "dir", r.opts.Dir,
		"leaseDuration", r.opts.LeaseDuration)
	kick := make(chan struct{}, 1)
	if r.opts.Selector != nil {
		go r.watchSecrets(ctx, kick)
	}
	t := time.NewTicker(r.opts.Period)
	defer t.Stop()
	for {
		r.round(ctx)
		select {
		case <-ctx.Done():
			r.shutdown(context.WithoutCancel(ctx))
			return nil
		case <-t.C:
		case <-kick:
		}
	}
}

// round is one pass: read, decide, act.
func (r *Reconciler) round(ctx context.Context) {
	log := klog.FromContext(ctx)
	tenants, err := r.read(ctx)
	if err != nil {
		// The tenants already known go on: a failed list says nothing
		// about whether they still exist.
		log.Error(err, "Reading the tenants failed; keeping the last known")
		tenants = r.last
	} else {
		r.last = tenants
	}
	claims, objs, members, err := r.leases.read(ctx)
	if err != nil {
		log.Error(err, "Reading the tenant Leases failed")
		r.stopUnrenewed(ctx)
		return
	}
	if err := r.leases.renewMember(ctx); err != nil {
		log.Error(err, "Renewing this replica's member Lease failed")
	}
	r.mu.Lock()
	r.claims = claims
	r.known = tenants
	r.mu.Unlock()
	byName := map[string]Tenant{}
	names := make([]string, 0, len(tenants))
	for _, t := range tenants {
		byName[t.Name] = t
		names = append(names, t.Name)
	}
	d := Decide(World{Self: r.opts.Identity, Now: r.now(), Tenants: names, Claims: claims,
		Members: members, Slack: r.opts.Slack})

	// The Leases of what stops are released or deleted once it has
	// stopped, never before: until then, Keep below renews them.
	for _, name := range d.Forget {
		r.stopAsync(ctx, name, func(ctx context.Context) {
			if err := r.leases.forgetIfOurs(ctx, name); err != nil && !apierrors.IsConflict(err) {
				log.Error(err, "Deleting the Lease of a removed tenant failed", "tenant", name)
				return
			}
			log.Info("Tenant removed; its controllers stopped, nothing in its cloud deleted", "tenant", name)
		})
	}
	for _, name := range d.Release {
		r.mu.Lock()
		_, stopping := r.stopping[name]
		r.mu.Unlock()
		if stopping {
			// Still stopping since an earlier round: kept this
			// replica's until it has, so no other starts it meanwhile.
			if _, err := r.leases.renew(ctx, objs[name], ""); err != nil {
				log.Error(err, "Renewing the Lease of a stopping tenant failed", "tenant", name)
			}
			continue
		}
		r.stopAsync(ctx, name, func(ctx context.Context) {
			if err := r.leases.releaseIfOurs(ctx, name); err != nil {
				log.Error(err, "Releasing a tenant's Lease failed", "tenant", name)
				return
			}
			log.Info("Released tenant for another replica", "tenant", name, "share", d.Share, "replicas", len(members))
		})
	}
	serve := map[string]bool{}
	for _, name := range d.Keep {
		cluster := ""
		if run := r.runner(name); run != nil {
			cluster = run.serving()
		}
		if _, err := r.leases.renew(ctx, objs[name], cluster); err != nil {
			log.Error(err, "Renewing a tenant's Lease failed", "tenant", name)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue // no longer ours: stopped below
			}
		} else {
			r.markRenewed(name)
		}
		serve[name] = true
	}
	for _, name := range d.Claim {
		if _, err := r.leases.claim(ctx, name, objs[name]); err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
				log.Error(err, "Claiming a tenant's Lease failed", "tenant", name)
			}
			continue
		}
		log.Info("Claimed tenant", "tenant", name, "share", d.Share, "replicas", len(members))
		r.markRenewed(name)
		serve[name] = true
	}
	for name, winner := range d.Duplicates {
		if run := r.runner(name); run != nil {
			if _, running := run.state(); running {
				log.Info("Stopping tenant: another tenant serves its cluster", "tenant", name, "servedBy", winner)
				r.stopAsync(ctx, name, nil) // started again once stopped, and waits in its check
			}
		}
	}
	r.preempt(ctx)
	r.stopUnrenewed(ctx)
	r.mu.Lock()
	var stale []string
	for name := range r.runners {
		if !serve[name] {
			stale = append(stale, name)
		}
	}
	r.mu.Unlock()
	for _, name := range stale {
		r.stopAsync(ctx, name, nil)
	}
	for name := range serve {
		r.ensureRun(ctx, byName[name])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tenantLeases.Set(float64(len(r.runners)))
	for name, run := range r.runners {
		v := 0.0
		if _, running := run.state(); running {
			v = 1
		}
		tenantServing.WithLabelValues(name).Set(v)
	}
}

// read lists the tenants of the Secrets and of the directory.
func (r *Reconciler) read(ctx context.Context) ([]Tenant, error) {
	var fromSecrets, fromDir []Tenant
	if r.opts.Selector != nil {
		list, err := r.opts.Client.CoreV1().Secrets(r.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: r.opts.Selector.String()})
		if err != nil {
			return nil, fmt.Errorf("listing the tenant Secrets in %s: %w", r.opts.Namespace, err)
		}
		for i := range list.Items {
			fromSecrets = append(fromSecrets, FromSecret(&list.Items[i]))
		}
	}
	if r.opts.Dir != "" {
		var err error
		if fromDir, err = FromDir(r.opts.Dir); err != nil {
			return nil, err
		}
	}
	all, dropped := Merge(fromSecrets, fromDir)
	for _, t := range dropped {
		klog.FromContext(ctx).Info("Warning: tenant file ignored, a Secret of the same tenant name exists", "file", t.File, "tenant", t.Name)
	}
	return all, nil
}

// ensureRun starts the tenant's run, or restarts it when the tenant changed.
func (r *Reconciler) ensureRun(ctx context.Context, t Tenant) {
	if t.Name == "" {
		return // held, but not read this round (reading failed): left as is
	}
	r.mu.Lock()
	_, stopping := r.stopping[t.Name]
	r.mu.Unlock()
	if stopping {
		return // started at a round after it has stopped
	}
	if run := r.runner(t.Name); run != nil {
		if run.tenant.Version == t.Version {
			return
		}
		klog.FromContext(ctx).Info("Tenant changed; restarting it", "tenant", t.Name, "source", t.Source())
		r.stopAsync(ctx, t.Name, nil)
		return
	}
	run := startRunner(ctx, t, runnerDeps{
		start: r.opts.Start, take: r.take, release: r.release, report: r.report,
		identify: r.identify, backoff: r.opts.Backoff, maxBackoff: r.opts.MaxBackoff,
	})
	r.mu.Lock()
	r.runners[t.Name] = run
	r.mu.Unlock()
}

func (r *Reconciler) runner(name string) *runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runners[name]
}

// stopAsync stops the tenant's run in the background, then calls after
// (if set) with the round's context: releasing or deleting its Lease once
// nothing of the tenant acts any more. A tenant not running here gets after
// at once.
func (r *Reconciler) stopAsync(ctx context.Context, name string, after func(context.Context)) {
	r.mu.Lock()
	run := r.runners[name]
	if run == nil {
		_, stopping := r.stopping[name]
		r.mu.Unlock()
		if after != nil && !stopping {
			after(ctx)
		}
		return
	}
	delete(r.runners, name)
	r.stopping[name] = run
	r.mu.Unlock()
	r.stops.Go(func() {
		run.stop()
		tenantServing.DeleteLabelValues(name)
		if after != nil {
			after(ctx)
		}
		r.mu.Lock()
		delete(r.stopping, name)
		delete(r.renewed, name)
		r.mu.Unlock()
	})
}

func (r *Reconciler) markRenewed(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renewed[name] = r.now()
}

// stopUnrenewed stops the runs whose Lease was not renewed for a Lease
// duration: another replica may serve them by now.
func (r *Reconciler) stopUnrenewed(ctx context.Context) {
	r.mu.Lock()
	var late []string
	for name := range r.runners {
		if at, ok := r.renewed[name]; !ok || r.now().Sub(at) >= r.opts.LeaseDuration {
			late = append(late, name)
		}
	}
	r.mu.Unlock()
	for _, name := range late {
		klog.FromContext(ctx).Info("Stopping tenant: its Lease could not be renewed", "tenant", name)
		r.stopAsync(ctx, name, nil)
	}
}

// take records that tenant serves cluster, unless another tenant does
// already: on this replica, or on another by its Lease. The first to serve
// a cluster keeps it; two that started at once on two replicas are settled
// by Decide (Duplicates), the lower name keeping it.
func (r *Reconciler) take(cluster, tenant string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if other, ok := r.serving[cluster]; ok && other != tenant {
		return other // preempt stops it if tenant's name is lower
	}
	// A tenant of a lower name on this replica waits for the cluster:
	// it is the one to serve it.
	for name, run := range r.runners {
		if c, running := run.state(); name < tenant && c == cluster && !running {
			return name
		}
	}
	now := r.now()
	for name, c := range r.claims {
		// This replica's own Leases may still show what it served in
		// the last round; what it serves now is in r.serving.
		if name != tenant && c.Holder != r.opts.Identity && c.Cluster == cluster && c.live(now) {
			return name
		}
	}
	r.serving[cluster] = tenant
	return ""
}

// preempt stops the run of a tenant serving a cluster that a tenant of a
// lower name on this replica waits for, so that which of two Secrets naming
// one cluster serves it does not depend on which connected first. The
// stopped one is started again and waits (take refuses it).
func (r *Reconciler) preempt(ctx context.Context) {
	r.mu.Lock()
	waiting := map[string]string{}
	for name, run := range r.runners {
		if c, running := run.state(); c != "" && !running {
			if w, ok := waiting[c]; !ok || name < w {
				waiting[c] = name
			}
		}
	}
	var stop []string
	for c, name := range r.serving {
		if w, ok := waiting[c]; ok && w < name {
			stop = append(stop, name)
			klog.FromContext(ctx).Info("Stopping tenant: a tenant of a lower name names the same cluster", "tenant", name, "cluster", c, "keptBy", w)
		}
	}
	r.mu.Unlock()
	for _, name := range stop {
		r.stopAsync(ctx, name, nil)
	}
}

func (r *Reconciler) release(cluster, tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serving[cluster] == tenant {
		delete(r.serving, cluster)
	}
}

// report records an Event on the tenant's Secret; a file's tenant has only
// the runner's log line.
func (r *Reconciler) report(t Tenant, reason string, err error) {
	if err != nil {
		tenantFailures.WithLabelValues(t.Name, reason).Inc()
	}
	if t.Secret == "" {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: r.opts.Namespace, Name: t.Secret}
	if err == nil {
		r.opts.Recorder.Eventf(ref, corev1.EventTypeNormal, reason, "Replica %s serves the tenant's cluster", r.opts.Identity)
		return
	}
	r.opts.Recorder.Eventf(ref, corev1.EventTypeWarning, reason, "%s; retrying with backoff, other tenants unaffected", err)
}

// shutdown stops every run, then releases its Lease and this replica's
// member Lease, so that the other replicas take the tenants at their next
// round rather than after the Leases expire.
func (r *Reconciler) shutdown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.LeaseDuration)
	defer cancel()
	log := klog.FromContext(ctx)
	r.mu.Lock()
	names := make([]string, 0, len(r.runners))
	for name := range r.runners {
		names = append(names, name)
	}
	r.mu.Unlock()
	for _, name := range names {
		r.stopAsync(ctx, name, nil)
	}
	r.stops.Wait()
	_, objs, _, err := r.leases.read(ctx)
	if err == nil {
		for name, lease := range objs {
			if holder(lease) == r.opts.Identity {
				if err := r.leases.release(ctx, lease); err != nil {
					log.Error(err, "Releasing a tenant's Lease at shutdown failed", "tenant", name)
				}
			}
		}
	}
	if err := r.leases.dropMember(ctx); err != nil {
		log.Error(err, "Deleting this replica's member Lease failed")
	}
	log.Info("Stopped serving tenants", "stopped", len(names))
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
