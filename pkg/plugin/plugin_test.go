package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	fakecloud "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/conformance"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// socket returns a unix socket endpoint with a short path (the limit is
// about 100 bytes).
func socket(t *testing.T) (endpoint, path string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "plug")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path = filepath.Join(dir, "p.sock")
	return "unix://" + path, path
}

// serve serves provider on endpoint, never calling its Initialize, until
// the returned stop is called or the test ends.
func serve(t *testing.T, endpoint string, provider cloudprovider.Interface) (stop func()) {
	t.Helper()
	return serveWith(t, endpoint, provider, nil)
}

// serveWith serves p on endpoint with client builder b (nil: Initialize is
// never called) until the returned stop is called or the test ends.
func serveWith(t *testing.T, endpoint string, p cloudprovider.Interface, b cloudprovider.ControllerClientBuilder) (stop func()) {
	t.Helper()
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = plugin.ServeWith(ctx, ln, p, plugin.Info{Version: "test"}, plugin.ServeOptions{ClientBuilder: b})
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func simProvider(t *testing.T, c *testenv.Cloud) cloudprovider.Interface {
	t.Helper()
	f, err := os.Open(c.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := sim.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func dial(t *testing.T, endpoint string) cloudprovider.Interface {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := plugin.Dial(ctx, plugin.Config{Endpoint: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.(interface{ Close() error }).Close() })
	return p
}

// The sim provider served as a plugin passes the conformance suite.
func TestSimPluginIsConformant(t *testing.T) {
	c := testenv.StartCloud(t)
	in, err := c.Create(simcloud.CreateRequest{Name: "conformance-1"})
	if err != nil {
		t.Fatal(err)
	}
	endpoint, _ := socket(t)
	serve(t, endpoint, simProvider(t, c))
	p := dial(t, endpoint)
	if p.ProviderName() != sim.ProviderName {
		t.Errorf("ProviderName = %q, want the plugin's %q", p.ProviderName(), sim.ProviderName)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Name}}
	results := conformance.Run(context.Background(), p, conformance.Options{Nodes: []*corev1.Node{node}, CallTimeout: 5 * time.Second})
	var report strings.Builder
	_ = conformance.WriteText(&report, results)
	if conformance.Failed(results) > 0 {
		t.Fatalf("the sim plugin failed conformance:\n%s", report.String())
	}
	for _, want := range []string{"Instances", "LoadBalancer", "Routes", "batch lookup"} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report does not cover %s:\n%s", want, report.String())
		}
	}
	if strings.Contains(report.String(), "SKIP") {
		t.Errorf("cases skipped against a plugin with every capability:\n%s", report.String())
	}
}

// wrong is a provider that breaks the contract in the ways providers do.
type wrong struct {
	fakecloud.Cloud
	ensures atomic.Int32
}

func (w *wrong) InstancesV2() (cloudprovider.InstancesV2, bool) { return w, true }
func (w *wrong) InstanceExists(_ context.Context, n *corev1.Node) (bool, error) {
	return false, fmt.Errorf("instance %s: not found", n.Name) // should be (false, nil)
}
func (w *wrong) InstanceShutdown(context.Context, *corev1.Node) (bool, error) { return false, nil }
func (w *wrong) InstanceMetadata(context.Context, *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{ProviderID: "wrong://x"}, nil // metadata for anything
}
func (w *wrong) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return w, true }
func (w *wrong) GetLoadBalancer(context.Context, string, *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}
func (w *wrong) GetLoadBalancerName(_ context.Context, _ string, s *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(s)
}
func (w *wrong) EnsureLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	n := w.ensures.Add(1) // a new address every time: not idempotent
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("192.0.2.%d", n)}}}, nil
}
func (w *wrong) UpdateLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) error {
	return nil
}
func (w *wrong) EnsureLoadBalancerDeleted(context.Context, string, *corev1.Service) error {
	return errors.New("load balancer not found") // should succeed
}
func (w *wrong) Routes() (cloudprovider.Routes, bool) { return nil, false }
func (w *wrong) ProviderName() string                 { return "wrong" }

// A plugin that breaks the contract fails, with messages that say what to fix.
func TestWrongPluginFailsConformance(t *testing.T) {
	endpoint, _ := socket(t)
	serve(t, endpoint, &wrong{})
	p := dial(t, endpoint)
	results := conformance.Run(context.Background(), p, conformance.Options{CallTimeout: 2 * time.Second})
	var report strings.Builder
	_ = conformance.WriteText(&report, results)
	t.Logf("conformance report of the wrong plugin:\n%s", report.String())
	for _, want := range []string{
		"an unknown instance must be (false, nil)",
		"metadata for an instance that does not exist",
		"ensuring again must find the same load balancer",
		"a Service whose load balancer failed to create could never be deleted",
	} {
		if !strings.Contains(report.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, report.String())
		}
	}
	if conformance.Failed(results) < 4 {
		t.Errorf("%d failures, want at least 4:\n%s", conformance.Failed(results), report.String())
	}
	var junit strings.Builder
	if err := conformance.WriteJUnit(&junit, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(junit.String(), `<failure message="InstanceExists(unknown node`) || !strings.Contains(junit.String(), `<testsuite name="outrigger-conformance/LoadBalancer"`) {
		t.Errorf("JUnit output:\n%s", junit.String())
	}
}

// scripted answers InstanceExists from a function, to check error mapping.
type scripted struct {
	fakecloud.Cloud
	err func() error
}

func (s *scripted) InstancesV2() (cloudprovider.InstancesV2, bool) { return s, true }
func (s *scripted) InstanceExists(context.Context, *corev1.Node) (bool, error) {
	return true, s.err()
}
func (s *scripted) InstanceShutdown(context.Context, *corev1.Node) (bool, error) { return false, nil }
func (s *scripted) InstanceMetadata(context.Context, *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return nil, s.err()
}
func (s *scripted) ProviderName() string { return "scripted" }

func TestErrorsCrossTheBoundary(t *testing.T) {
	var next error
	endpoint, _ := socket(t)
	serve(t, endpoint, &scripted{err: func() error { return next }})
	p := dial(t, endpoint)
	v2, _ := p.InstancesV2()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	tests := []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"not found", fmt.Errorf("gone: %w", cloudprovider.InstanceNotFound), func(e error) bool { return errors.Is(e, cloudprovider.InstanceNotFound) }},
		{"not implemented", cloudprovider.NotImplemented, func(e error) bool { return errors.Is(e, cloudprovider.NotImplemented) }},
		{"implemented elsewhere", cloudprovider.ImplementedElsewhere, func(e error) bool { return errors.Is(e, cloudprovider.ImplementedElsewhere) }},
		{"throttled", cloudproviderapi.NewRetryError("slow down", 3*time.Second), func(e error) bool {
			after, ok := provider.RetryAfter(e)
			return ok && after == 3*time.Second
		}},
		{"quota", provider.WithReason(provider.ReasonQuotaExceeded, errors.New("no more")), func(e error) bool { return provider.Reason(e) == provider.ReasonQuotaExceeded }},
		{"plain", errors.New("boom"), func(e error) bool { return e != nil && strings.Contains(e.Error(), "boom") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next = tt.err
			_, err := v2.InstanceMetadata(context.Background(), node)
			if !tt.check(err) {
				t.Errorf("plugin error %v came back as %v (%T)", tt.err, err, err)
			}
		})
	}
}

func TestTCPWithoutTLSIsRefused(t *testing.T) {
	if _, err := plugin.Listen("127.0.0.1:0", nil); err == nil || !strings.Contains(err.Error(), "without TLS") {
		t.Errorf("serving TCP without TLS: %v", err)
	}
	_, err := plugin.Dial(context.Background(), plugin.Config{Endpoint: "127.0.0.1:4040"})
	if err == nil || !strings.Contains(err.Error(), "refusing to reach plugin") {
		t.Errorf("dialing TCP without TLS: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// BenchmarkCallOverUnixSocket measures one InstanceExists round trip through
// the plugin boundary (client, unix socket, server, back), many in flight.
func BenchmarkCallOverUnixSocket(b *testing.B) {
	endpoint := "unix://" + filepath.Join(b.TempDir(), "p.sock")
	ln, err := plugin.Listen(endpoint, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = plugin.Serve(ctx, ln, &scripted{err: func() error { return nil }}, plugin.Info{}) }()
	p, err := plugin.Dial(ctx, plugin.Config{Endpoint: endpoint})
	if err != nil {
		b.Fatal(err)
	}
	v2, _ := p.InstancesV2()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bench", Labels: map[string]string{"kubernetes.io/hostname": "bench"}}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v2.InstanceExists(ctx, node); err != nil {
				b.Fatal(err)
			}
		}
	})
}
