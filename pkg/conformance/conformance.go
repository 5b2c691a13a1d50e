// Package conformance is the conformance suite for Outrigger plugins: it checks a
// provider's behaviour against the cloudprovider contract, capability by
// capability, with messages a provider author can act on. `outrigger
// conformance` runs it against a plugin; Run works on any
// cloudprovider.Interface (so from `go test` too).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Options configure a run.
type Options struct {
	// Nodes are nodes whose instances exist in the cloud (name, and
	// providerID if the cloud needs one). Cases that need a real instance
	// are skipped without them.
	Nodes []*corev1.Node
	// CallTimeout is the deadline of every call. Default 10s.
	CallTimeout time.Duration
	// ClusterName is passed to load balancer and route calls.
	ClusterName string
	// RouteCIDR is the destination of the test route. Default: a random
	// /32 in 198.18.192.0/19 (the benchmarking range, which no real
	// network uses).
	RouteCIDR string
	// UnknownProviderID is the providerID of an instance that does not
	// exist, in the form the provider accepts (AWS:
	// aws:///us-east-1a/i-0fffffffffffffff0). Default:
	// <provider name>://outrigger-conformance-missing-<random>, which a
	// provider that parses its IDs may reject as malformed.
	UnknownProviderID string
	// ServiceAnnotations are set on the test Service (what a provider
	// needs to make a load balancer in a test account, say).
	ServiceAnnotations map[string]string
	// ClientBuilder, when set, is passed to the provider's Initialize
	// before the cases run, as the CCM does; a panic there fails the run.
	ClientBuilder cloudprovider.ControllerClientBuilder
	// OtherClusterName is a second cluster name: what the provider made
	// for ClusterName must not be listed under it. Default: ClusterName
	// with "-other".
	OtherClusterName string
	// Require names cases that must run: a capability ("Routes") or part
	// of a case's name. A required case that was skipped, or matched no
	// case, fails.
	Require []string
	// Capabilities, when set, limits the run to these capabilities
	// (Identity always runs).
	Capabilities []string
}

// Result is one case's outcome.
type Result struct {
	Capability string
	Name       string
	// Failure is empty when the case passed.
	Failure  string
	Skipped  string
	Duration time.Duration
}

// Passed reports whether the case ran and passed: a skipped case did not.
func (r Result) Passed() bool { return r.Failure == "" && r.Skipped == "" }

type suite struct {
	p       cloudprovider.Interface
	opts    Options
	results []Result
}

func (s *suite) run(ctx context.Context, capability, name string, fn func(ctx context.Context) error) {
	start := time.Now()
	r := Result{Capability: capability, Name: name}
	done := make(chan error, 1)
	cctx, cancel := context.WithTimeout(ctx, 6*s.opts.CallTimeout)
	go func() { done <- fn(cctx) }()
	select {
	case err := <-done:
		var skip skipError
		switch {
		case errors.As(err, &skip):
			r.Skipped = string(skip)
		case err != nil:
			r.Failure = err.Error()
		}
	case <-cctx.Done():
		r.Failure = fmt.Sprintf("did not finish within %s: a call ignored its deadline (each call must return by its context's deadline)", 6*s.opts.CallTimeout)
	}
	cancel()
	r.Duration = time.Since(start)
	s.results = append(s.results, r)
}

type skipError string

func (e skipError) Error() string { return string(e) }

// call bounds one provider call by the call timeout and checks it honoured it.
func call[T any](ctx context.Context, s *suite, what string, fn func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	start := time.Now()
	v, err := fn(cctx)
	if d := time.Since(start); d > s.opts.CallTimeout+time.Second {
		return v, fmt.Errorf("%s took %s, past its %s deadline: calls must return when their context ends", what, d.Round(time.Millisecond), s.opts.CallTimeout)
	}
	return v, err
}

// Run checks p and returns one result per case.
func Run(ctx context.Context, p cloudprovider.Interface, opts Options) []Result {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 10 * time.Second
	}
	if opts.ClusterName == "" {
		opts.ClusterName = "outrigger-conformance"
	}
	if opts.RouteCIDR == "" {
		opts.RouteCIDR = fmt.Sprintf("198.18.%d.%d/32", 192+rand.IntN(32), rand.IntN(256))
	}
	if opts.OtherClusterName == "" {
		opts.OtherClusterName = opts.ClusterName + "-other"
	}
	s := &suite{p: p, opts: opts}
	s.identity(ctx)
	if opts.ClientBuilder != nil && !s.initialize(ctx) {
		return s.required()
	}
	switch {
	case !s.wanted("Instances"):
	default:
		// A provider with only the older Instances runs through the
		// adapter Outrigger's controllers use.
		if v2, ok := provider.InstancesV2(p); ok {
			s.instances(ctx, v2)
		} else {
			s.skipAll("Instances", "the provider offers neither InstancesV2 nor Instances")
		}
	}
	switch lb, ok := p.LoadBalancer(); {
	case !s.wanted("LoadBalancer"):
	case ok && lb != nil:
		s.loadBalancer(ctx, lb)
	default:
		s.skipAll("LoadBalancer", "the provider does not offer LoadBalancer")
	}
	switch r, ok := p.Routes(); {
	case !s.wanted("Routes"):
	case ok && r != nil:
		s.routes(ctx, r)
	default:
		s.skipAll("Routes", "the provider does not offer Routes")
	}
	return s.required()
}

// wanted reports whether the run covers capability.
func (s *suite) wanted(capability string) bool {
	return len(s.opts.Capabilities) == 0 || slices.ContainsFunc(s.opts.Capabilities, func(c string) bool { return strings.EqualFold(c, capability) })
}

// initialize calls the provider's Initialize, as the CCM does before any
// controller starts; false when it panicked.
func (s *suite) initialize(ctx context.Context) bool {
	ok := true
	s.run(ctx, "Identity", "Initialize with a client builder", func(context.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				ok = false
				err = fmt.Errorf("Initialize panicked: %v", r)
			}
		}()
		s.p.Initialize(s.opts.ClientBuilder, ctx.Done())
		return nil
	})
	return ok
}

// required fails the required cases that were skipped or did not run.
func (s *suite) required() []Result {
	for _, want := range s.opts.Require {
		matched := false
		for i := range s.results {
			r := &s.results[i]
			if !strings.EqualFold(r.Capability, want) && !strings.Contains(strings.ToLower(r.Name), strings.ToLower(want)) {
				continue
			}
			matched = true
			if r.Skipped != "" {
				r.Failure = fmt.Sprintf("required (--require %s) but skipped: %s", want, r.Skipped)
				r.Skipped = ""
			}
		}
		if !matched {
			s.results = append(s.results, Result{Capability: "Required", Name: want,
				Failure: fmt.Sprintf("--require %s matched no case that ran", want)})
		}
	}
	return s.results
}

func (s *suite) skipAll(capability, why string) {
	s.results = append(s.results, Result{Capability: capability, Name: "all cases", Skipped: why})
}

func (s *suite) identity(ctx context.Context) {
	s.run(ctx, "Identity", "has a provider name", func(context.Context) error {
		if s.p.ProviderName() == "" {
			return errors.New("ProviderName() is empty")
		}
		return nil
	})
	if r, ok := s.p.(interface{ Ready(context.Context) error }); ok {
		s.run(ctx, "Identity", "probe says ready", func(ctx context.Context) error {
			_, err := call(ctx, s, "Probe", func(ctx context.Context) (struct{}, error) { return struct{}{}, r.Ready(ctx) })
			return err
		})
	}
}

// unknownNode is a node no cloud has: with providerID, or one made up.
func unknownNode(provider, providerID string) *corev1.Node {
	id := fmt.Sprintf("outrigger-conformance-missing-%08x", rand.Uint32())
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: id, UID: types.UID(id)}}
	n.Spec.ProviderID = provider + "://" + id
	if providerID != "" {
		n.Spec.ProviderID = providerID
	}
	return n
}

func (s *suite) instances(ctx context.Context, v2 cloudprovider.InstancesV2) {
	const cap = "Instances"
	missing := unknownNode(s.p.ProviderName(), s.opts.UnknownProviderID)
	s.run(ctx, cap, "InstanceExists is false, not an error, for an unknown node", func(ctx context.Context) error {
		ok, err := call(ctx, s, "InstanceExists", func(ctx context.Context) (bool, error) { return v2.InstanceExists(ctx, missing) })
		if err != nil {
			return fmt.Errorf("InstanceExists(unknown node %s) returned an error (%v): an unknown instance must be (false, nil), or the lifecycle controller can never delete the node of a deleted instance", missing.Name, err)
		}
		if ok {
			return fmt.Errorf("InstanceExists(unknown node %s) = true: the lifecycle controller would never delete a node whose instance is gone", missing.Name)
		}
		return nil
	})
	s.run(ctx, cap, "InstanceMetadata fails for an unknown node", func(ctx context.Context) error {
		md, err := call(ctx, s, "InstanceMetadata", func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) {
			return v2.InstanceMetadata(ctx, missing)
		})
		if err == nil {
			return fmt.Errorf("InstanceMetadata(unknown node %s) = %+v with no error: metadata for an instance that does not exist would initialize a node wrongly (return cloudprovider.InstanceNotFound)", missing.Name, md)
		}
		return nil
	})
	if len(s.opts.Nodes) == 0 {
		s.results = append(s.results, Result{Capability: cap, Name: "cases for existing instances", Skipped: "no existing nodes given (--node)"})
	}
	for _, n := range s.opts.Nodes {
		s.run(ctx, cap, "existing instance "+n.Name+": exists, not shut down, consistent metadata", func(ctx context.Context) error {
			ok, err := call(ctx, s, "InstanceExists", func(ctx context.Context) (bool, error) { return v2.InstanceExists(ctx, n) })
			if err != nil || !ok {
				return fmt.Errorf("InstanceExists(%s) = %v, %v; want true, nil for a node given as existing", n.Name, ok, err)
			}
			if _, err := call(ctx, s, "InstanceShutdown", func(ctx context.Context) (bool, error) { return v2.InstanceShutdown(ctx, n) }); err != nil {
				return fmt.Errorf("InstanceShutdown(%s): %v", n.Name, err)
			}
			md1, err := call(ctx, s, "InstanceMetadata", func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) { return v2.InstanceMetadata(ctx, n) })
			if err != nil || md1 == nil {
				return fmt.Errorf("InstanceMetadata(%s) = %v, %v; want metadata for an existing instance", n.Name, md1, err)
			}
			if md1.ProviderID == "" {
				return fmt.Errorf("InstanceMetadata(%s).ProviderID is empty: nodes are matched to instances by it", n.Name)
			}
			md2, err := call(ctx, s, "InstanceMetadata", func(ctx context.Context) (*cloudprovider.InstanceMetadata, error) { return v2.InstanceMetadata(ctx, n) })
			if err != nil || !equality.Semantic.DeepEqual(md1, md2) {
				return fmt.Errorf("InstanceMetadata(%s) changed between two calls: %+v then %+v (%v)", n.Name, md1, md2, err)
			}
			// Looked up again by the providerID it gave, as a node has
			// after initialization.
			byID := n.DeepCopy()
			byID.Spec.ProviderID = md1.ProviderID
			if ok, err := call(ctx, s, "InstanceExists", func(ctx context.Context) (bool, error) { return v2.InstanceExists(ctx, byID) }); err != nil || !ok {
				return fmt.Errorf("InstanceExists(%s with providerID %s it returned) = %v, %v; want true", n.Name, md1.ProviderID, ok, err)
			}
			return nil
		})
	}
	batch, ok := v2.(provider.BatchInstances)
	if !ok {
		return
	}
	s.run(ctx, cap, "batch lookup agrees with single lookups", func(ctx context.Context) error {
		nodes := append([]*corev1.Node{missing}, s.opts.Nodes...)
		sts, err := call(ctx, s, "InstancesStatus", func(ctx context.Context) ([]provider.InstanceStatus, error) { return batch.InstancesStatus(ctx, nodes) })
		if err != nil {
			return fmt.Errorf("InstancesStatus: %v", err)
		}
		if len(sts) != len(nodes) {
			return fmt.Errorf("InstancesStatus returned %d statuses for %d nodes: want one per node, in order", len(sts), len(nodes))
		}
		if sts[0].Exists || sts[0].Err != nil {
			return fmt.Errorf("InstancesStatus says the unknown node %s exists=%v (err %v); want exists=false", missing.Name, sts[0].Exists, sts[0].Err)
		}
		for i, n := range s.opts.Nodes {
			st := sts[i+1]
			if !st.Exists || st.Metadata == nil || st.Metadata.ProviderID == "" {
				return fmt.Errorf("InstancesStatus for existing node %s = %+v; want exists with metadata", n.Name, st)
			}
		}
		return nil
	})
}

func testService() *corev1.Service {
	id := fmt.Sprintf("%08x-0000-4000-8000-%012x", rand.Uint32(), rand.Uint64()&0xffffffffffff)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "outrigger-conformance", Name: "lb-" + id[:8], UID: types.UID(id)},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}},
			// As the API server defaults it: providers refuse an affinity
			// they do not know, and "" is none they know.
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
}

func (s *suite) loadBalancer(ctx context.Context, lb cloudprovider.LoadBalancer) {
	const cap = "LoadBalancer"
	cluster := s.opts.ClusterName
	nodes := s.opts.Nodes
	if len(nodes) == 0 {
		nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "conformance-node"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.254.1"}}}}}
	}
	svc := testService()
	svc.Annotations = s.opts.ServiceAnnotations
	s.run(ctx, cap, "a new Service has no load balancer", func(ctx context.Context) error {
		g, err := getLB(ctx, s, lb, cluster, svc)
		if err != nil || g.ok {
			return fmt.Errorf("GetLoadBalancer(never-created Service) = exists %v, err %v; want false, nil", g.ok, err)
		}
		return nil
	})
	s.run(ctx, cap, "deleting a load balancer that does not exist succeeds", func(ctx context.Context) error {
		_, err := call(ctx, s, "EnsureLoadBalancerDeleted", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, lb.EnsureLoadBalancerDeleted(ctx, cluster, svc)
		})
		if err != nil {
			return fmt.Errorf("EnsureLoadBalancerDeleted(never-created Service): %v; want nil, or a Service whose load balancer failed to create could never be deleted", err)
		}
		return nil
	})
	var first *corev1.LoadBalancerStatus
	s.run(ctx, cap, "EnsureLoadBalancer returns an ingress", func(ctx context.Context) error {
		st, err := call(ctx, s, "EnsureLoadBalancer", func(ctx context.Context) (*corev1.LoadBalancerStatus, error) {
			return lb.EnsureLoadBalancer(ctx, cluster, svc, nodes)
		})
		if err != nil {
			return fmt.Errorf("EnsureLoadBalancer: %v", err)
		}
		if st == nil || len(st.Ingress) == 0 || st.Ingress[0].IP == "" && st.Ingress[0].Hostname == "" {
			return fmt.Errorf("EnsureLoadBalancer returned %+v: want at least one ingress with an IP or hostname", st)
		}
		first = st
		return nil
	})
	s.run(ctx, cap, "EnsureLoadBalancer is idempotent", func(ctx context.Context) error {
		if first == nil {
			return skipError("the first ensure failed")
		}
		st, err := call(ctx, s, "EnsureLoadBalancer", func(ctx context.Context) (*corev1.LoadBalancerStatus, error) {
			return lb.EnsureLoadBalancer(ctx, cluster, svc, nodes)
		})
		if err != nil || !equality.Semantic.DeepEqual(st, first) {
			return fmt.Errorf("a second EnsureLoadBalancer of the same Service returned %+v (err %v), the first %+v: ensuring again must find the same load balancer, not create or re-address one", st, err, first)
		}
		return nil
	})
	s.run(ctx, cap, "GetLoadBalancer matches the ensured status", func(ctx context.Context) error {
		if first == nil {
			return skipError("the first ensure failed")
		}
		g, err := getLB(ctx, s, lb, cluster, svc)
		if err != nil || !g.ok || !equality.Semantic.DeepEqual(g.st, first) {
			return fmt.Errorf("GetLoadBalancer = %+v, exists %v, err %v; want exists with %+v (what EnsureLoadBalancer returned)", g.st, g.ok, err, first)
		}
		return nil
	})
	if owners, ok := lb.(provider.LoadBalancerOwnership); ok {
		s.run(ctx, cap, "listed as this cluster's, and not as another cluster's", func(ctx context.Context) error {
			if first == nil {
				return skipError("the first ensure failed")
			}
			listed := func(cluster string) (bool, error) {
				owned, err := call(ctx, s, "ListLoadBalancerOwners", func(ctx context.Context) ([]provider.OwnedLoadBalancer, error) {
					return owners.ListLoadBalancerOwners(ctx, cluster)
				})
				return slices.ContainsFunc(owned, func(o provider.OwnedLoadBalancer) bool { return o.ServiceUID == svc.UID }), err
			}
			if ok, err := listed(cluster); err != nil || !ok {
				return fmt.Errorf("ListLoadBalancerOwners(%q) does not list the load balancer just ensured for it (err %v): its orphan could never be found", cluster, err)
			}
			if ok, err := listed(s.opts.OtherClusterName); err != nil || ok {
				return fmt.Errorf("ListLoadBalancerOwners(%q) lists the load balancer cluster %q made (err %v): another cluster's orphan sweep would delete it", s.opts.OtherClusterName, cluster, err)
			}
			return nil
		})
	}
	s.run(ctx, cap, "UpdateLoadBalancer with other nodes succeeds", func(ctx context.Context) error {
		if first == nil {
			return skipError("the first ensure failed")
		}
		_, err := call(ctx, s, "UpdateLoadBalancer", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, lb.UpdateLoadBalancer(ctx, cluster, svc, nodes[:len(nodes)-1])
		})
		if err != nil {
			return fmt.Errorf("UpdateLoadBalancer: %v", err)
		}
		return nil
	})
	s.run(ctx, cap, "EnsureLoadBalancerDeleted removes it, twice", func(ctx context.Context) error {
		for i := range 2 {
			if _, err := call(ctx, s, "EnsureLoadBalancerDeleted", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, lb.EnsureLoadBalancerDeleted(ctx, cluster, svc)
			}); err != nil {
				return fmt.Errorf("EnsureLoadBalancerDeleted (call %d): %v", i+1, err)
			}
		}
		_, ok, err := lb.GetLoadBalancer(ctx, cluster, svc)
		if err != nil || ok {
			return fmt.Errorf("after EnsureLoadBalancerDeleted, GetLoadBalancer = exists %v, err %v; want false, nil", ok, err)
		}
		return nil
	})
}

// lbState is what GetLoadBalancer answered.
type lbState struct {
	st *corev1.LoadBalancerStatus
	ok bool
}

func getLB(ctx context.Context, s *suite, lb cloudprovider.LoadBalancer, cluster string, svc *corev1.Service) (lbState, error) {
	return call(ctx, s, "GetLoadBalancer", func(ctx context.Context) (lbState, error) {
		st, ok, err := lb.GetLoadBalancer(ctx, cluster, svc)
		return lbState{st, ok}, err
	})
}

func (s *suite) routes(ctx context.Context, r cloudprovider.Routes) {
	const cap = "Routes"
	if len(s.opts.Nodes) == 0 {
		s.results = append(s.results, Result{Capability: cap, Name: "route round trip", Skipped: "no existing nodes given (--node) to route to"})
		return
	}
	target := s.opts.Nodes[0]
	route := &cloudprovider.Route{TargetNode: types.NodeName(target.Name), DestinationCIDR: s.opts.RouteCIDR}
	has := func(ctx context.Context, cluster string) (bool, error) {
		list, err := call(ctx, s, "ListRoutes", func(ctx context.Context) ([]*cloudprovider.Route, error) {
			return r.ListRoutes(ctx, cluster)
		})
		if err != nil {
			return false, fmt.Errorf("ListRoutes: %v", err)
		}
		for _, rt := range list {
			if rt.DestinationCIDR == route.DestinationCIDR && string(rt.TargetNode) == target.Name {
				route.Name = rt.Name
				return true, nil
			}
		}
		return false, nil
	}
	s.run(ctx, cap, "create, list, delete round trip", func(ctx context.Context) error {
		if _, err := call(ctx, s, "CreateRoute", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.CreateRoute(ctx, s.opts.ClusterName, string(target.UID), route)
		}); err != nil {
			return fmt.Errorf("CreateRoute %s -> %s: %v", route.DestinationCIDR, target.Name, err)
		}
		if ok, err := has(ctx, s.opts.ClusterName); err != nil || !ok {
			return fmt.Errorf("the created route %s -> %s is not in ListRoutes (err %v): the route controller would create it again on every pass", route.DestinationCIDR, target.Name, err)
		}
		// Another cluster's route controller deletes every route it lists
		// that none of its nodes wants.
		if ok, err := has(ctx, s.opts.OtherClusterName); err != nil || ok {
			return fmt.Errorf("ListRoutes(%q) lists the route cluster %q made (err %v): that cluster's route controller would delete it", s.opts.OtherClusterName, s.opts.ClusterName, err)
		}
		if _, err := call(ctx, s, "DeleteRoute", func(ctx context.Context) (struct{}, error) {
			return struct{}{}, r.DeleteRoute(ctx, s.opts.ClusterName, route)
		}); err != nil {
			return fmt.Errorf("DeleteRoute: %v", err)
		}
		if ok, err := has(ctx, s.opts.ClusterName); err != nil || ok {
			return fmt.Errorf("the deleted route is still in ListRoutes (err %v)", err)
		}
		return nil
	})
}
