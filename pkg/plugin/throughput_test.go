package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	fakecloud "k8s.io/cloud-provider/fake"
)

// gated is an InstancesV2 provider that throttles every call while
// throttling is set, and otherwise holds each call until want calls are
// inside it at once: it answers only if whoever calls it sends that many
// calls concurrently.
type gated struct {
	fakecloud.Cloud
	want int

	mu         sync.Mutex
	throttling bool
	inside     int
	calls      int
	all        chan struct{} // closed once want calls were inside at once
}

func (g *gated) InstancesV2() (cloudprovider.InstancesV2, bool) { return g, true }
func (g *gated) ProviderName() string                           { return "gated" }
func (g *gated) InstanceExists(context.Context, *corev1.Node) (bool, error) {
	return true, nil
}
func (g *gated) InstanceShutdown(context.Context, *corev1.Node) (bool, error) { return false, nil }
func (g *gated) InstanceMetadata(ctx context.Context, n *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	g.mu.Lock()
	g.calls++
	if g.throttling {
		g.mu.Unlock()
		return nil, cloudproviderapi.NewRetryError("slow down", time.Second)
	}
	g.inside++
	if g.inside == g.want {
		close(g.all)
	}
	g.mu.Unlock()
	select {
	case <-g.all:
		return &cloudprovider.InstanceMetadata{ProviderID: "gated://" + n.Name}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// The plugin server adds no limits of its own: after the provider throttled
// many nodes' calls, the plugin still passes as many concurrent calls
// through as the provider itself would get. (The server once wrapped the
// provider in its own call layer, which halved its rate on such throttles
// down to 0.5 calls/s and serialized calls per node.)
func TestServerKeepsTheProvidersThroughput(t *testing.T) {
	const concurrent = 32
	g := &gated{want: concurrent, throttling: true, all: make(chan struct{})}
	dir, err := os.MkdirTemp("", "plug")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "p.sock")
	ln, err := Listen(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = Serve(ctx, ln, g, Info{})
	}()
	t.Cleanup(func() { cancel(); <-served })
	p, err := Dial(ctx, Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.(*Client).Close() })
	v2, _ := p.InstancesV2()
	node := func(i int) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}}
	}

	// Throttle many distinct nodes, enough to slow any adaptive limiter.
	for i := range 20 {
		if _, err := v2.InstanceMetadata(ctx, node(i)); err == nil {
			t.Fatal("the throttling provider answered")
		}
	}
	g.mu.Lock()
	g.throttling = false
	g.mu.Unlock()

	// Now every call waits until all of them are in the provider at once;
	// a server that paced or serialized them would never get there. The
	// deadline only bounds a failing test.
	callCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	errs := make(chan error, concurrent)
	for i := range concurrent {
		go func() {
			// Half of them ask about one node: serializing calls per
			// object is the client's call layer's job, not the server's.
			n := node(i)
			if i%2 == 0 {
				n = node(0)
			}
			_, err := v2.InstanceMetadata(callCtx, n)
			errs <- err
		}()
	}
	for range concurrent {
		if err := <-errs; err != nil {
			g.mu.Lock()
			inside := g.inside
			g.mu.Unlock()
			t.Fatalf("call through the plugin: %v (the server held calls back: %d of %d reached the provider at once)", err, inside, concurrent)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls != 20+concurrent {
		t.Errorf("provider got %d calls, want %d: the plugin must pass each call through once", g.calls, 20+concurrent)
	}
}
