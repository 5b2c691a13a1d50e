package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// Invariants, each of which must have no violation. The first two are
// checked all along (they are never allowed, even for a moment); every one
// of them is checked once the system has quiesced.
const (
	DuplicateLB          = "duplicate-lbs-per-service"
	NodeDeletedInstance  = "node-deleted-whose-instance-runs"
	OrphanLB             = "cloud-lb-without-service"
	NoIngress            = "lb-service-without-ingress"
	StaleListeners       = "lb-listeners-differ-from-service"
	OrphanRoute          = "route-without-node"
	MissingRoute         = "node-without-cidr-or-route"
	FinalizerLeft        = "finalizer-left-on-service"
	NodeNotInitialized   = "node-not-initialized"
	NodeWithoutInstance  = "node-whose-instance-is-gone"
	DuplicatePodCIDR     = "pod-cidr-on-two-nodes"
	cleanupFinalizer     = "service.kubernetes.io/load-balancer-cleanup"
	continuousCheckEvery = time.Second
)

// Invariants lists them all, in report order.
var Invariants = []string{OrphanLB, NoIngress, DuplicateLB, StaleListeners, OrphanRoute, MissingRoute,
	NodeDeletedInstance, FinalizerLeft, NodeNotInitialized, NodeWithoutInstance, DuplicatePodCIDR}

// Invariants of the optional settings, checked when the setting is on.
const (
	// CrossClassWrite: a CCM of a shared run (Config.Shared) created or
	// changed a load balancer tagged with the other's class (checked as
	// the cloud answers).
	CrossClassWrite = "lb-written-by-other-class"
	// CrossClassDelete: a CCM of a shared run deleted the other's load
	// balancer while its Service still asked the other for one (checked
	// as the cloud answers).
	CrossClassDelete = "lb-deleted-by-other-class"
	// WrongClassLB: a Service's load balancer is tagged with a class
	// other than the Service's (a shared run, once settled).
	WrongClassLB = "lb-class-differs-from-service"
	// HangBlocked: a Service of Outrigger's class created during an
	// object-hang fault (Config.Hang), whose load balancer the cloud
	// answers, got no ingress before the fault lifted.
	HangBlocked = "lb-blocked-by-hung-calls"
	// CrossClusterWrite: a replica of one cluster of a run with a second
	// cluster (Config.SecondCluster) created or changed a load balancer
	// or route whose cluster-id tag is the other cluster's (checked as
	// the cloud answers).
	CrossClusterWrite = "cloud-object-written-by-other-cluster"
	// CrossClusterDelete: a replica of one cluster deleted a load balancer
	// or route whose cluster-id tag is the other cluster's (checked as the
	// cloud answers).
	CrossClusterDelete = "cloud-object-deleted-by-other-cluster"
	// WrongClusterLB: the load balancer of a Service of either cluster is
	// not tagged with that cluster's ID (once settled).
	WrongClusterLB = "lb-cluster-id-differs-from-cluster"
)

// invariants are those a run of cfg checks, in report order.
func (cfg Config) invariants() []string {
	out := slices.Clone(Invariants)
	if cfg.Shared {
		out = append(out, CrossClassWrite, CrossClassDelete, WrongClassLB)
	}
	if cfg.Hang {
		out = append(out, HangBlocked)
	}
	if cfg.SecondCluster {
		out = append(out, CrossClusterWrite, CrossClusterDelete, WrongClusterLB)
	}
	return out
}

// Violation is one object breaking one invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Object    string `json:"object"`
	Detail    string `json:"detail,omitempty"`
	// At is the offset in the run, in seconds.
	At float64 `json:"at"`
}

// watch records Node deletions (a Node deleted while its instance runs is
// a violation the moment it happens) and when Services get their ingress.
func (h *harness) watch(ctx context.Context) (*sync.WaitGroup, error) {
	// Watches must not carry the request timeout of h.client.
	cfg := rest.CopyConfig(h.cp.Config)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0)
	nodes := f.Core().V1().Nodes().Informer()
	services := f.Core().V1().Services().Informer()
	if err := services.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		if svc, ok := obj.(*corev1.Service); ok {
			return []string{string(svc.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.nodes, h.svcIndex = nodes.GetStore(), services.GetIndexer()
	h.mu.Unlock()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		if in, ok := h.cloud.Get(n.Name); ok && in.State != simcloud.StateTerminated {
			h.violate(NodeDeletedInstance, n.Name, "instance "+in.ID+" is "+in.State)
		}
	}}); err != nil {
		return nil, err
	}
	ingress := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		h.hangIngress(svc.Name)
		h.mu.Lock()
		t, ok := h.created[svc.Name]
		delete(h.created, svc.Name)
		tf, foreign := h.createdForeign[svc.Name]
		delete(h.createdForeign, svc.Name)
		h.mu.Unlock()
		if ok {
			h.report.ingress(time.Since(t))
		}
		if foreign {
			h.report.foreignIngress(time.Since(tf))
		}
	}
	if _, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    ingress,
		UpdateFunc: func(_, obj any) { ingress(obj) },
	}); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { f.Start(ctx.Done()); f.WaitForCacheSync(ctx.Done()); <-ctx.Done(); f.Shutdown() })
	return &wg, nil
}

func (h *harness) violate(invariant, object, detail string) {
	h.report.violate(Violation{Invariant: invariant, Object: object, Detail: detail, At: h.since().Seconds()})
}

// checkContinuously looks for duplicate load balancers and pod CIDRs every
// second: one Service with two cloud load balancers, or two nodes with one
// pod CIDR, is never right, not even for a moment.
func (h *harness) checkContinuously(ctx context.Context) {
	t := time.NewTicker(continuousCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for owner, names := range h.lbsByOwner(h.cloud.LoadBalancers()) {
			if len(names) > 1 {
				h.violate(DuplicateLB, owner, strings.Join(names, ","))
			}
		}
		h.mu.Lock()
		store := h.nodes
		h.mu.Unlock()
		if store == nil {
			continue
		}
		var nodes []*corev1.Node
		for _, obj := range store.List() {
			if n, ok := obj.(*corev1.Node); ok {
				nodes = append(nodes, n)
			}
		}
		for cidr, names := range nodesByPodCIDR(nodes) {
			if len(names) > 1 {
				h.violate(DuplicatePodCIDR, cidr, strings.Join(names, ","))
			}
		}
	}
}

// nodesByPodCIDR maps every pod CIDR to the nodes that hold it.
func nodesByPodCIDR(nodes []*corev1.Node) map[string][]string {
	out := map[string][]string{}
	for _, n := range nodes {
		for _, cidr := range n.Spec.PodCIDRs {
			out[cidr] = append(out[cidr], n.Name)
		}
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

// lbsByOwner maps every Service (its namespace/name, prefixed "second/" for
// the second cluster's) to its load balancers.
func (h *harness) lbsByOwner(lbs []simcloud.LoadBalancer) map[string][]string {
	out := map[string][]string{}
	for _, lb := range lbs {
		owner := lb.Tags["service"]
		if !h.ownsTags(true, lb.Tags) {
			owner = secondObject + owner
		}
		out[owner] = append(out[owner], lb.Name)
	}
	return out
}

// secondObject prefixes the second cluster's objects in violations.
const secondObject = "second/"

// settled lists what is not (yet) as it must be once everything has
// converged, in both clusters of a run with a second cluster; an error
// means an API server could not be read.
func (h *harness) settled(ctx context.Context) ([]Violation, error) {
	out, err := h.settledIn(ctx, h.client, true)
	if err != nil {
		return nil, err
	}
	if h.second != nil {
		more, err := h.settledIn(ctx, h.second.client, false)
		if err != nil {
			return nil, err
		}
		for _, v := range more {
			v.Object = secondObject + v.Object
			out = append(out, v)
		}
	}
	for owner, names := range h.lbsByOwner(h.cloud.LoadBalancers()) {
		if len(names) > 1 {
			out = append(out, Violation{Invariant: DuplicateLB, Object: owner, Detail: strings.Join(names, ",")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Invariant+out[i].Object < out[j].Invariant+out[j].Object })
	return out, nil
}

// settledIn checks one cluster, the first or the second, through client,
// and the cloud's load balancers and routes it owns (ownsTags).
func (h *harness) settledIn(ctx context.Context, client kubernetes.Interface, first bool) ([]Violation, error) {
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	svcList, err := client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []Violation
	bad := func(inv, obj, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, Object: obj, Detail: fmt.Sprintf(format, args...)})
	}
	var routes []simcloud.Route
	for _, r := range h.cloud.Routes() {
		if h.ownsTags(first, r.Tags) {
			routes = append(routes, r)
		}
	}
	myID, secondID := h.clusterIDs()
	if !first {
		myID = secondID
	}

	nodes := map[string]bool{}
	routed := map[string]bool{}
	for _, r := range routes {
		routed[r.Target+" "+r.Destination] = true
	}
	for _, n := range nodeList.Items {
		nodes[n.Name] = true
		in, ok := h.cloud.Get(n.Name)
		if !ok || in.State == simcloud.StateTerminated {
			bad(NodeWithoutInstance, n.Name, "the Node outlives its instance")
			continue
		}
		if n.Spec.ProviderID == "" || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == cloudproviderapi.TaintExternalCloudProvider
		}) {
			bad(NodeNotInitialized, n.Name, "providerID %q, taints %v", n.Spec.ProviderID, n.Spec.Taints)
		}
		if len(n.Spec.PodCIDRs) == 0 {
			bad(MissingRoute, n.Name, "no pod CIDR")
		}
		for _, cidr := range n.Spec.PodCIDRs {
			if !routed[n.Name+" "+cidr] {
				bad(MissingRoute, n.Name, "no route for %s", cidr)
			}
		}
	}
	nodePtrs := make([]*corev1.Node, 0, len(nodeList.Items))
	for i := range nodeList.Items {
		nodePtrs = append(nodePtrs, &nodeList.Items[i])
	}
	for cidr, names := range nodesByPodCIDR(nodePtrs) {
		if len(names) > 1 {
			bad(DuplicatePodCIDR, cidr, "%s", strings.Join(names, ","))
		}
	}
	for _, r := range routes {
		if !nodes[r.Target] {
			bad(OrphanRoute, r.Name, "%s -> %s", r.Destination, r.Target)
		}
	}

	lbs := map[string]simcloud.LoadBalancer{}
	all := map[string]simcloud.LoadBalancer{}
	for _, lb := range h.cloud.LoadBalancers() {
		all[lb.Name] = lb
		if h.ownsTags(first, lb.Tags) {
			lbs[lb.Name] = lb
		}
	}
	want := map[string]bool{}
	for _, svc := range svcList.Items {
		name := svc.Namespace + "/" + svc.Name
		if svc.DeletionTimestamp != nil {
			bad(FinalizerLeft, name, "deleted, finalizers %v", svc.Finalizers)
			continue
		}
		// Outrigger serves the Services without a class; in a shared run
		// the second CCM those of foreignClass (in the first cluster).
		ours := svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
			(svc.Spec.LoadBalancerClass == nil || first && h.cfg.Shared && *svc.Spec.LoadBalancerClass == foreignClass)
		if !ours {
			if slices.Contains(svc.Finalizers, cleanupFinalizer) {
				bad(FinalizerLeft, name, "type %s, class %v, still has %s", svc.Spec.Type, svc.Spec.LoadBalancerClass, cleanupFinalizer)
			}
			continue
		}
		lbName := cloudprovider.DefaultLoadBalancerName(&svc)
		want[lbName] = true
		if len(svc.Status.LoadBalancer.Ingress) == 0 {
			bad(NoIngress, name, "")
		}
		// Looked up among every cluster's: one tagged with the other
		// cluster's ID is this one's, wrongly tagged.
		lb, ok := all[lbName]
		if !ok {
			if len(svc.Status.LoadBalancer.Ingress) > 0 {
				bad(NoIngress, name, "ingress %v without a cloud load balancer", svc.Status.LoadBalancer.Ingress)
			}
			continue
		}
		if h.cfg.SecondCluster && lb.Tags[sim.TagClusterID] != myID {
			bad(WrongClusterLB, name, "load balancer %s tagged cluster-id %q, the cluster's is %q", lbName, lb.Tags[sim.TagClusterID], myID)
		}
		if class := ptr.Deref(svc.Spec.LoadBalancerClass, ""); h.cfg.Shared && lb.Tags[sim.TagClass] != class {
			bad(WrongClassLB, name, "load balancer %s tagged class %q, the Service's is %q", lbName, lb.Tags[sim.TagClass], class)
		}
		if got, wantL := listeners(lb), servicePorts(&svc); !slices.Equal(got, wantL) {
			bad(StaleListeners, name, "listeners %v, Service ports %v", got, wantL)
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 && svc.Status.LoadBalancer.Ingress[0].IP != lb.VIP {
			bad(NoIngress, name, "ingress %s, load balancer VIP %s", svc.Status.LoadBalancer.Ingress[0].IP, lb.VIP)
		}
	}
	for name, lb := range lbs {
		if !want[name] {
			bad(OrphanLB, name, "tagged %s", lb.Tags["service"])
		}
	}
	return out, nil
}

func listeners(lb simcloud.LoadBalancer) []string {
	var out []string
	for _, l := range lb.Listeners {
		out = append(out, fmt.Sprintf("%s/%d->%d", l.Protocol, l.Port, l.NodePort))
	}
	sort.Strings(out)
	return out
}

func servicePorts(svc *corev1.Service) []string {
	var out []string
	for _, p := range svc.Spec.Ports {
		out = append(out, fmt.Sprintf("%s/%d->%d", p.Protocol, p.Port, p.NodePort))
	}
	sort.Strings(out)
	return out
}

// quiesce waits, after the last fault, until every invariant holds on two
// checks in a row, and records the time that took; what still fails at the
// deadline is a violation.
func (h *harness) quiesce(ctx context.Context) {
	h.mu.Lock()
	from := h.lastLift
	h.mu.Unlock()
	if from.IsZero() {
		from = time.Now()
	}
	deadline := time.Now().Add(h.cfg.Quiesce)
	var first time.Time
	var last []Violation
	for time.Now().Before(deadline) && ctx.Err() == nil {
		v, err := h.settled(ctx)
		switch {
		case err != nil:
			first = time.Time{}
		case len(v) == 0 && !first.IsZero():
			h.report.quiesced(first.Sub(from))
			h.logf("quiesced %.1fs after the last fault", first.Sub(from).Seconds())
			h.recordFinal(ctx)
			return
		case len(v) == 0:
			first = time.Now()
		default:
			first, last = time.Time{}, v
		}
		t := time.NewTimer(time.Second)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	h.logf("not quiesced within %v: %d violations remain", h.cfg.Quiesce, len(last))
	for _, v := range last {
		h.violate(v.Invariant, v.Object, v.Detail)
	}
	h.recordFinal(ctx)
}

func (h *harness) recordFinal(ctx context.Context) {
	f := Final{Instances: len(h.liveNodes())}
	for _, lb := range h.cloud.LoadBalancers() {
		if h.ownsTags(true, lb.Tags) {
			f.LoadBalancers++
		}
	}
	for _, r := range h.cloud.Routes() {
		if h.ownsTags(true, r.Tags) {
			f.Routes++
		}
	}
	if l, err := h.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		f.Nodes = len(l.Items)
	}
	if l, err := h.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			switch {
			case s.Spec.Type != corev1.ServiceTypeLoadBalancer:
			case s.Spec.LoadBalancerClass == nil:
				f.LoadBalancerServices++
			case h.cfg.Shared && *s.Spec.LoadBalancerClass == foreignClass:
				f.ForeignLoadBalancerServices++
			}
		}
	}
	h.report.mu.Lock()
	h.report.Final = f
	h.report.mu.Unlock()
	if h.second != nil {
		sf := h.secondFinal(ctx)
		h.report.mu.Lock()
		h.report.SecondCluster.Final = sf
		h.report.mu.Unlock()
	}
}
