package plugin

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	cloudprovider "k8s.io/cloud-provider"
	cloudfake "k8s.io/cloud-provider/fake"

	"github.com/outrigger-ccm/outrigger/pkg/plugin/pluginpb"
)

// flakyProvider panics in its first failures Initializes (no credentials
// yet), blocks in Initialize while hold is open, and watches nodes.
type flakyProvider struct {
	*cloudfake.Cloud
	failures int32
	hold     chan struct{}
	informer bool

	inits atomic.Int32
}

func (p *flakyProvider) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {
	if p.hold != nil {
		<-p.hold
	}
	if n := p.inits.Add(1); n <= p.failures {
		panic("no credentials yet")
	}
}

func (p *flakyProvider) SetInformers(f informers.SharedInformerFactory) {
	if p.informer {
		f.Core().V1().Nodes().Informer()
	}
}

// fakeBuilder hands out one clientset.
type fakeBuilder struct{ client kubernetes.Interface }

func (b fakeBuilder) Config(string) (*rest.Config, error)         { return &rest.Config{}, nil }
func (b fakeBuilder) ConfigOrDie(string) *rest.Config             { return &rest.Config{} }
func (b fakeBuilder) Client(string) (kubernetes.Interface, error) { return b.client, nil }
func (b fakeBuilder) ClientOrDie(string) kubernetes.Interface     { return b.client }
func newTestInitializer(p cloudprovider.Interface, b fakeBuilder) (*initializer, *server) {
	stop := make(chan struct{})
	o := newInitializer(p, b, stop)
	o.backoff, o.maxBackoff = time.Millisecond, 5*time.Millisecond
	s := newServer(p, Info{})
	s.initialized = o.ready
	return o, s
}

func probe(t *testing.T, s *server) *pluginpb.ProbeResponse {
	t.Helper()
	resp, err := s.Probe(context.Background(), &pluginpb.ProbeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A failed Initialize is tried again with backoff until it succeeds: calls
// meanwhile fail Unavailable with the reason and Probe reports not ready;
// after, calls go through and Probe reports ready. Before any call for
// work (a standby replica's plugin) Probe reports ready.
func TestFailedInitializeIsRetriedAndNotReadyUntilItSucceeds(t *testing.T) {
	p := &flakyProvider{Cloud: &cloudfake.Cloud{}, failures: 3}
	o, s := newTestInitializer(p, fakeBuilder{fake.NewClientset()})
	if r := probe(t, s); !r.GetReady() {
		t.Fatalf("not ready before any call for work: %s", r.GetMessage())
	}
	err := o.ensure(context.Background())
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no credentials yet") {
		t.Fatalf("first call: %v, want Unavailable with the panic's reason", err)
	}
	if r := probe(t, s); r.GetReady() || !strings.Contains(r.GetMessage(), "no credentials yet") {
		t.Errorf("Probe after a failed Initialize: ready %v %q, want not ready with the reason", r.GetReady(), r.GetMessage())
	}
	// Retried without further calls: Initialize succeeds on its fourth run.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for o.ensure(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("never initialized after %d Initializes", p.inits.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if n := p.inits.Load(); n != 4 {
		t.Errorf("%d Initializes, want 4 (three failures, then one success)", n)
	}
	if r := probe(t, s); !r.GetReady() {
		t.Errorf("not ready once initialized: %s", r.GetMessage())
	}
	// And never again.
	for range 3 {
		if err := o.ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.inits.Load(); n != 4 {
		t.Errorf("%d Initializes after success, want 4", n)
	}
}

// Calls waiting for a running Initialize give up at their own deadline;
// the one that started it is not needed for it to finish.
func TestCallsWaitingForInitializeHonourTheirDeadlines(t *testing.T) {
	hold := make(chan struct{})
	p := &flakyProvider{Cloud: &cloudfake.Cloud{}, hold: hold}
	o, _ := newTestInitializer(p, fakeBuilder{fake.NewClientset()})
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := o.ensure(ctx)
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("call waiting for a hung Initialize: %v, want DeadlineExceeded", err)
		}
	}
	close(hold)
	if err := o.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := p.inits.Load(); n != 1 {
		t.Errorf("%d Initializes, want 1", n)
	}
}

// No call waits behind another's wait for the provider's informers: with
// the node list hung, a call with a short deadline returns at it while a
// call with a long one still waits; both finish once the list answers.
func TestNoCallWaitsBehindAnotherInformerSync(t *testing.T) {
	release := make(chan struct{})
	var listed sync.Once
	listing := make(chan struct{})
	client := fake.NewClientset()
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		listed.Do(func() { close(listing) })
		<-release
		return false, nil, nil
	})
	p := &flakyProvider{Cloud: &cloudfake.Cloud{}, informer: true}
	o, _ := newTestInitializer(p, fakeBuilder{client})

	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLong()
	longDone := make(chan error, 1)
	go func() { longDone <- o.ensure(long) }()
	<-listing // the long call's Initialize has run; the informer lists
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := o.ensure(ctx)
		cancel()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "has not synced") {
			t.Errorf("short call: %v, want Unavailable: not synced", err)
		}
		select {
		case err := <-longDone:
			t.Fatalf("the long call ended (%v) before the list answered", err)
		default:
		}
	}
	close(release)
	if err := <-longDone; err != nil {
		t.Errorf("long call after the list answered: %v", err)
	}
	if err := o.ensure(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestInClusterAccessIsReadOnceItIsThere: in a pod, a client asked for
// before the ServiceAccount files are there (the plugin's own token, which
// Outrigger writes after both containers started) fails saying so, and
// the next ask reads them again: the provider's Initialize, run again with
// backoff, then gets its clients.
func TestInClusterAccessIsReadOnceItIsThere(t *testing.T) {
	var loads atomic.Int32
	written := atomic.Bool{}
	token := t.TempDir() + "/token"
	if err := os.WriteFile(token, []byte("plugin-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &inCluster{load: func() (*rest.Config, error) {
		loads.Add(1)
		if !written.Load() {
			return nil, errors.New("open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file or directory")
		}
		return &rest.Config{Host: "https://127.0.0.1:6443", BearerTokenFile: token}, nil
	}}
	if _, err := b.Config("acme"); err == nil || !strings.Contains(err.Error(), "no ServiceAccount token mounted or none written yet") {
		t.Fatalf("Config before the token: err = %v, want one saying the token is not there", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("ClientOrDie before the token did not panic")
			}
		}()
		b.ClientOrDie("acme")
	}()
	written.Store(true)
	cfg, err := b.Config("acme")
	if err != nil || cfg.BearerTokenFile == "" || !strings.Contains(cfg.UserAgent, "acme") {
		t.Fatalf("Config once the token is there: %+v, %v", cfg, err)
	}
	if _, err := b.Client("other"); err != nil {
		t.Errorf("Client: %v", err)
	}
	if n := loads.Load(); n != 3 {
		t.Errorf("the files were read %d times, want 3: until they were there, then kept", n)
	}
}
