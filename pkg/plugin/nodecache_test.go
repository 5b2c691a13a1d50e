package plugin_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

// received counts the bytes of every message a plugin received.
type received struct{ bytes atomic.Int64 }

func (r *received) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (r *received) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (r *received) HandleConn(context.Context, stats.ConnStats)                       {}
func (r *received) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		r.bytes.Add(int64(in.Length))
	}
}

// servePlugin serves p with the Go SDK on endpoint, counting what it
// receives; stop ends it (its node cache with it).
func servePlugin(t *testing.T, endpoint string, p cloudprovider.Interface) (in *received, stop func()) {
	t.Helper()
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	in = &received{}
	srv := grpc.NewServer(grpc.StatsHandler(in))
	pluginpb.RegisterCloudProviderServer(srv, plugin.NewServer(p, plugin.Info{}))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { srv.Stop(); <-served }) }
	t.Cleanup(stop)
	return in, stop
}

func service(i int) *corev1.Service {
	s := lbService()
	s.Name, s.UID = fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("0b0e7a6c-0000-4000-8000-%012d", i))
	return s
}

// With NODE_CACHE, a plugin is sent each backend Node once: later load
// balancers name them, a Node whose resourceVersion changed is sent again,
// and the provider gets every backend, in order, each time.
func TestNodeCacheSendsEachNodeOnce(t *testing.T) {
	const n = 5_000
	endpoint, _ := socket(t)
	p := &backends{}
	in, _ := servePlugin(t, endpoint, p)
	lb, _ := dial(t, endpoint).LoadBalancer()
	nodes := kubeletNodes(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()

	if _, err := lb.EnsureLoadBalancer(ctx, "cluster", service(0), nodes); err != nil {
		t.Fatal(err)
	}
	first := in.bytes.Load()
	for i := 1; i <= 20; i++ {
		if _, err := lb.EnsureLoadBalancer(ctx, "cluster", service(i), nodes); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		err := checkBackends(p.ensured, nodes)
		p.mu.Unlock()
		if err != nil {
			t.Fatalf("load balancer %d: %v", i, err)
		}
	}
	perCall := (in.bytes.Load() - first) / 20
	t.Logf("%d backends: %d bytes for the first load balancer, %d for each of the next 20", n, first, perCall)
	if perCall > 4096 {
		t.Errorf("each load balancer after the first cost %d bytes, the first %d: the backends are sent again, not named by their set", perCall, first)
	}

	// Ten nodes change: they, and only they, travel again.
	changed := make([]*corev1.Node, n)
	copy(changed, nodes)
	for i := range 10 {
		c := nodes[i*100].DeepCopy()
		c.ResourceVersion += "-1"
		c.Status.Addresses[0].Address = fmt.Sprintf("198.18.255.%d", i)
		changed[i*100] = c
	}
	before := in.bytes.Load()
	if err := lb.UpdateLoadBalancer(ctx, "cluster", service(0), changed); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	err := checkBackends(p.update, changed)
	p.mu.Unlock()
	if err != nil {
		t.Fatalf("after ten nodes changed: %v", err)
	}
	if cost, want := in.bytes.Load()-before, int64(n*60)+20*first/n; cost > want {
		t.Errorf("the update with ten changed nodes cost %d bytes, want at most %d (the refs and those ten)", cost, want)
	}
}

// Load balancers reconciled at once, as the workers do when Outrigger
// starts, send the Nodes once between them, not once each.
func TestNodeCacheConcurrentCallsSendTheNodesOnce(t *testing.T) {
	const n, calls = 5_000, 16
	endpoint, _ := socket(t)
	alone, _ := socket(t)
	ref, _ := servePlugin(t, alone, &backends{})
	lbAlone, _ := dial(t, alone).LoadBalancer()
	nodes := kubeletNodes(n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	if _, err := lb0(ctx, lbAlone, nodes); err != nil {
		t.Fatal(err)
	}
	full := ref.bytes.Load()

	in, _ := servePlugin(t, endpoint, &backends{})
	lb, _ := dial(t, endpoint).LoadBalancer()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := lb.EnsureLoadBalancer(ctx, "cluster", service(i), nodes); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := in.bytes.Load()
	t.Logf("%d concurrent load balancers of %d backends: %d bytes (one call in full: %d)", calls, n, got, full)
	if got > 2*full {
		t.Errorf("%d concurrent load balancers sent %d bytes, over twice one call in full (%d): the Nodes went more than once", calls, got, full)
	}
}

func lb0(ctx context.Context, lb cloudprovider.LoadBalancer, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	return lb.EnsureLoadBalancer(ctx, "cluster", service(0), nodes)
}

// A plugin that restarted holds no Node: the call it fails for that is
// made again with the Nodes in full, and succeeds.
func TestNodeCacheAfterThePluginRestarted(t *testing.T) {
	endpoint, _ := socket(t)
	p := &backends{}
	_, stop := servePlugin(t, endpoint, p)
	client := dial(t, endpoint)
	lb, _ := client.LoadBalancer()
	nodes := kubeletNodes(100)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	if _, err := lb.EnsureLoadBalancer(ctx, "cluster", service(0), nodes); err != nil {
		t.Fatal(err)
	}
	stop()
	again := &backends{}
	servePlugin(t, endpoint, again)
	// The call must meet the new plugin, not the connection to the old.
	for client.(interface{ Ready(context.Context) error }).Ready(ctx) != nil {
		select {
		case <-ctx.Done():
			t.Fatal("the restarted plugin never answered")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := lb.UpdateLoadBalancer(ctx, "cluster", service(0), nodes); err != nil {
		t.Fatalf("UpdateLoadBalancer after the plugin restarted: %v", err)
	}
	again.mu.Lock()
	defer again.mu.Unlock()
	if err := checkBackends(again.update, nodes); err != nil {
		t.Error(err)
	}
}

// A Node whose resourceVersion the informer moved on is a new version
// for the plugin even with the same name.
func TestNodeCacheTellsVersionsApart(t *testing.T) {
	endpoint, _ := socket(t)
	p := &backends{}
	servePlugin(t, endpoint, p)
	lb, _ := dial(t, endpoint).LoadBalancer()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a failing test only
	defer cancel()
	node := func(rv, zone string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv, Labels: map[string]string{"zone": zone}}}
	}
	for _, step := range []struct{ rv, zone string }{{"1", "a"}, {"2", "b"}, {"1", "a"}, {"2", "b"}} {
		if err := lb.UpdateLoadBalancer(ctx, "cluster", service(0), []*corev1.Node{node(step.rv, step.zone)}); err != nil {
			t.Fatal(err)
		}
		p.mu.Lock()
		got := p.update[0].Labels["zone"]
		p.mu.Unlock()
		if got != step.zone {
			t.Errorf("resourceVersion %s: the provider got zone %q, want %q", step.rv, got, step.zone)
		}
	}
}
