//go:build integration

package plugin_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/plugin"
)

// initProvider records its Initialize, uses the client builder there as
// real providers do (AWS builds its client with ClientOrDie), and watches
// nodes through the informers it is given.
type initProvider struct {
	*fake.Cloud
	panicWith string

	mu        sync.Mutex
	inits     int
	version   string
	informers informers.SharedInformerFactory
}

func (p *initProvider) Initialize(b cloudprovider.ControllerClientBuilder, _ <-chan struct{}) {
	if p.panicWith != "" {
		panic(p.panicWith)
	}
	v, err := b.ClientOrDie("init-test").Discovery().ServerVersion()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inits++
	if err == nil {
		p.version = v.GitVersion
	}
}

func (p *initProvider) SetInformers(f informers.SharedInformerFactory) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.informers = f
	f.Core().V1().Nodes().Informer()
}

// TestInitializeOnFirstWork: a plugin served with a client builder
// initializes its provider on the first call for work, once, not on the
// calls a standby Outrigger makes; its informers are synced by then.
func TestInitializeOnFirstWork(t *testing.T) {
	node := testenv.Name("init-node")
	testenv.CreateNode(t, node, nil)
	p := &initProvider{Cloud: &fake.Cloud{EnableInstancesV2: true, ExistsByProviderID: true}}
	endpoint, _ := socket(t)
	serveWith(t, endpoint, p, plugin.ClientBuilderFor(testenv.Kubeconfig))
	client := dial(t, endpoint) // GetPluginInfo, GetCapabilities
	if err := client.(interface{ Ready(context.Context) error }).Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	if p.inits != 0 {
		t.Errorf("Initialize ran %d times before any call for work", p.inits)
	}
	p.mu.Unlock()
	inst, _ := client.InstancesV2()
	for range 2 {
		if _, err := inst.InstanceExists(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: corev1.NodeSpec{ProviderID: "fake://" + node}}); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inits != 1 || !strings.HasPrefix(p.version, "v1.") {
		t.Errorf("Initialize ran %d times, reaching API server version %q; want once, with a working client", p.inits, p.version)
	}
	if p.informers == nil {
		t.Fatal("SetInformers was not called")
	}
	if _, err := p.informers.Core().V1().Nodes().Lister().Get(node); err != nil {
		t.Errorf("the provider's node informer lacks %s: %v", node, err)
	}
}

// TestInitializePanics: a provider whose Initialize panics (no API access,
// say) fails every call for work with the reason, its Probe reports the
// plugin not ready with it, and the plugin serves on.
func TestInitializePanics(t *testing.T) {
	p := &initProvider{Cloud: &fake.Cloud{EnableInstancesV2: true}, panicWith: "no credentials"}
	endpoint, _ := socket(t)
	serveWith(t, endpoint, p, plugin.ClientBuilderFor(""))
	client := dial(t, endpoint)
	defer func() {
		err := client.(interface{ Ready(context.Context) error }).Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), "no credentials") {
			t.Errorf("Ready = %v, want not ready with the panic's reason", err)
		}
	}()
	inst, _ := client.InstancesV2()
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := inst.InstanceExists(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{ProviderID: "fake://n"}})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "the provider's Initialize panicked: no credentials") {
			t.Errorf("err = %v, want the panic's reason", err)
		}
		if s, ok := status.FromError(err); ok && s.Code() == codes.OK {
			t.Errorf("status %v", s)
		}
	}
}
