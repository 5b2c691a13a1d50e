//go:build integration

package manager_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/internal/testenv/apiproxy"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// lbOnly is a provider double with load balancers and nothing else (no
// instances, zones, routes), that watches nodes through SetInformers, as some
// providers do, and records how it was initialized.
type lbOnly struct {
	initialized atomic.Int32
	// calledEarly counts cloud calls made before Initialize.
	calledEarly atomic.Int32

	mu        sync.Mutex
	informers informers.SharedInformerFactory
	builder   cloudprovider.ControllerClientBuilder
}

var (
	_ cloudprovider.Interface    = (*lbOnly)(nil)
	_ cloudprovider.InformerUser = (*lbOnly)(nil)
)

func (p *lbOnly) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	p.mu.Lock()
	p.builder = b
	p.mu.Unlock()
	p.initialized.Add(1)
}

func (p *lbOnly) SetInformers(f informers.SharedInformerFactory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.informers = f
	// Ask for the node informer before the factory starts, as providers do.
	f.Core().V1().Nodes().Informer()
}

// nodesSeen lists nodes through the informer the provider was given.
func (p *lbOnly) nodesSeen() ([]*corev1.Node, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.informers == nil {
		return nil, false
	}
	nodes, err := p.informers.Core().V1().Nodes().Lister().List(labels.Everything())
	return nodes, err == nil
}

func (p *lbOnly) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return p, true }
func (p *lbOnly) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (p *lbOnly) InstancesV2() (cloudprovider.InstancesV2, bool)   { return nil, false }
func (p *lbOnly) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (p *lbOnly) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (p *lbOnly) Routes() (cloudprovider.Routes, bool)             { return nil, false }
func (p *lbOnly) ProviderName() string                             { return "lb-only" }
func (p *lbOnly) HasClusterID() bool                               { return true }

func (p *lbOnly) checkInitialized() {
	if p.initialized.Load() == 0 {
		p.calledEarly.Add(1)
	}
}

func (p *lbOnly) GetLoadBalancer(context.Context, string, *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	p.checkInitialized()
	return nil, false, nil
}

func (p *lbOnly) GetLoadBalancerName(_ context.Context, _ string, s *corev1.Service) string {
	return "lb-" + string(s.UID)
}

func (p *lbOnly) EnsureLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	p.checkInitialized()
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "198.18.250.1"}}}, nil
}

func (p *lbOnly) UpdateLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) error {
	p.checkInitialized()
	return nil
}

func (p *lbOnly) EnsureLoadBalancerDeleted(context.Context, string, *corev1.Service) error {
	p.checkInitialized()
	return nil
}

// startWith runs Outrigger in-process with provider p under the name
// lb-only, the given flags after the test defaults, until stop is called.
func startWith(t *testing.T, p *lbOnly, flags ...string) (stop func()) {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register("lb-only", func(io.Reader) (cloudprovider.Interface, error) { return p, nil })
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	args := append([]string{"--kubeconfig=" + testenv.Kubeconfig, "--cloud-provider=lb-only", "--secure-port=0"}, flags...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = klog.NewContext(ctx, klog.NewKlogr().WithValues("test", t.Name()))
	mgr, err := manager.New(ctx, opts, reg)
	if err != nil {
		cancel()
		t.Fatalf("outrigger with a load-balancer-only provider and default --controllers: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("outrigger: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestLoadBalancerOnlyProviderRunsWithDefaultControllers: upstream skips
// the controllers a provider cannot serve; Outrigger used to exit.
func TestLoadBalancerOnlyProviderRunsWithDefaultControllers(t *testing.T) {
	p := &lbOnly{}
	startWith(t, p, "--leader-elect=false")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: testenv.Name("lbonly"), Namespace: "default"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := testenv.Client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = testenv.Client.CoreV1().Services("default").Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	testenv.Eventually(t, 30*time.Second, "the Service's ingress from the load-balancer-only provider", func() (bool, error) {
		s, err := testenv.Client.CoreV1().Services("default").Get(context.Background(), svc.Name, metav1.GetOptions{})
		return err == nil && len(s.Status.LoadBalancer.Ingress) == 1 && s.Status.LoadBalancer.Ingress[0].IP == "198.18.250.1", err
	})
	if n := p.calledEarly.Load(); n > 0 {
		t.Errorf("%d cloud calls before Initialize", n)
	}
}

// TestProviderInitializedOnceOnTheLeader: as upstream, Initialize and
// SetInformers run on the replica that leads, once, before any controller
// calls the cloud; the informers it is given are started. A standby
// replica initializes only when it takes over.
func TestProviderInitializedOnceOnTheLeader(t *testing.T) {
	node := testenv.Name("informed")
	testenv.CreateNode(t, node, nil)
	lease := testenv.Name("init-lease")
	fast := []string{"--leader-elect=true", "--leader-elect-resource-name=" + lease, "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=250ms"}
	first, second := &lbOnly{}, &lbOnly{}
	stopFirst := startWith(t, first, fast...)
	testenv.Eventually(t, 30*time.Second, "the first replica to lead and initialize its provider", func() (bool, error) {
		return first.initialized.Load() == 1, nil
	})
	// The standby reaches the API server through a proxy, to count its
	// own tries for the lease.
	standby := apiproxy.Start(t, nil)
	startWith(t, second, append([]string{"--kubeconfig=" + standby.Kubeconfig}, fast...)...)
	testenv.Eventually(t, 20*time.Second, "the provider's informer to list the node", func() (bool, error) {
		nodes, _ := first.nodesSeen()
		for _, n := range nodes {
			if n.Name == node {
				return true, nil
			}
		}
		return false, nil
	})
	// The standby must not initialize while the first leads: three tries
	// for the lease (each reads it), each of which would have made it
	// initialize had it led.
	tries := testenv.Count(func() int {
		return standby.Requests(http.MethodGet, apiproxy.LeasePath(lease))
	})
	testenv.Consistently(t, 30*time.Second, "the standby not initializing, the leader initialized once", tries, 3, func() error {
		if n := second.initialized.Load(); n != 0 {
			return fmt.Errorf("the standby replica initialized its provider %d times", n)
		}
		if n := first.initialized.Load(); n != 1 {
			return fmt.Errorf("the leader initialized its provider %d times, want once", n)
		}
		return nil
	})
	stopFirst()
	// Initialize, then SetInformers: wait for both, not for the first.
	testenv.Eventually(t, 30*time.Second, "the standby to take over, initialize its provider and give it informers", func() (bool, error) {
		_, informed := second.nodesSeen()
		return second.initialized.Load() == 1 && informed, nil
	})
}

// With --use-service-account-credentials the provider's Initialize gets
// clients of their own ServiceAccounts in kube-system, as upstream hands
// them (created when missing, with tokens from the TokenRequest API);
// without, Outrigger's own identity.
func TestInitializeGetsServiceAccountClients(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		sa    bool
	}{{nil, false}, {[]string{"--use-service-account-credentials"}, true}} {
		p := &lbOnly{}
		stop := startWith(t, p, append([]string{"--leader-elect=false", "--controllers=service-lb-controller"}, tc.flags...)...)
		testenv.Eventually(t, 30*time.Second, "the provider initialized", func() (bool, error) { return p.initialized.Load() > 0, nil })
		p.mu.Lock()
		b := p.builder
		p.mu.Unlock()
		name := testenv.Name("provider-sa")
		cfg, err := b.Config(name)
		if err != nil {
			t.Fatal(err)
		}
		_, getErr := testenv.Client.CoreV1().ServiceAccounts("kube-system").Get(context.Background(), name, metav1.GetOptions{})
		// The ServiceAccount's clients carry none of Outrigger's own
		// credentials (the package's kubeconfig holds a client
		// certificate): their token comes from the TokenRequest API.
		ownCredentials := len(cfg.CertData) > 0 || cfg.CertFile != ""
		if got := getErr == nil && !ownCredentials; got != tc.sa {
			t.Errorf("flags %v: clients of ServiceAccount kube-system/%s %v (its Get: %v; Outrigger's own credentials: %v), want %v", tc.flags, name, got, getErr, ownCredentials, tc.sa)
		}
		stop()
	}
}
