package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
)

// ServeOptions say how ServeWith serves a provider.
type ServeOptions struct {
	// ClientBuilder, when set, is handed to the provider's Initialize,
	// which runs on the first call that asks the provider for work
	// (anything but GetPluginInfo, GetCapabilities and Probe), and again
	// with backoff (1s doubling to 1m) after it failed (panicked), until
	// it succeeds; meanwhile calls for work fail Unavailable with the
	// reason and Probe reports not ready. Only a
	// leading Outrigger makes such calls, so the provider initializes where
	// its controllers run, as in upstream's CCM, and a standby replica's
	// plugin never does. A provider that watches objects
	// (cloudprovider.InformerUser) gets a shared informer factory from it,
	// started and synced before the call goes on. Nil: Initialize is not
	// called.
	ClientBuilder cloudprovider.ControllerClientBuilder
}

// ClientBuilderFor is the client builder of a plugin's Kubernetes access:
// the kubeconfig at path, else the pod's ServiceAccount files. Without
// either it is a builder whose clients fail with an error that says so (a
// provider that needs none never notices).
func ClientBuilderFor(path string) cloudprovider.ControllerClientBuilder {
	if path == "" {
		if _, err := rest.InClusterConfig(); errors.Is(err, rest.ErrNotInCluster) {
			return noAPI{err: fmt.Errorf("the plugin has no Kubernetes API access (no --kubeconfig given and not in a pod): %w", err)}
		}
		return &inCluster{load: rest.InClusterConfig}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return noAPI{err: fmt.Errorf("the plugin has no Kubernetes API access (--kubeconfig %s): %w", path, err)}
	}
	return clientbuilder.SimpleControllerClientBuilder{ClientConfig: cfg}
}

// inCluster is the builder of the pod's ServiceAccount files, read when a
// client is first asked for, and again on every ask until they are there:
// the plugin's own token, which Outrigger writes
// (--plugin-service-account), may come after the plugin started. Until
// then the provider's Initialize fails (panics) with the reason and is run
// again with backoff.
type inCluster struct {
	// load reads the files: rest.InClusterConfig.
	load func() (*rest.Config, error)

	mu  sync.Mutex
	cfg *rest.Config
}

func (b *inCluster) builder() (clientbuilder.SimpleControllerClientBuilder, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg == nil {
		cfg, err := b.load()
		if err != nil {
			return clientbuilder.SimpleControllerClientBuilder{}, fmt.Errorf("the plugin has no Kubernetes API access (no --kubeconfig given, and no ServiceAccount token mounted or none written yet): %w", err)
		}
		b.cfg = cfg
	}
	return clientbuilder.SimpleControllerClientBuilder{ClientConfig: b.cfg}, nil
}

func (b *inCluster) Config(name string) (*rest.Config, error) {
	sb, err := b.builder()
	if err != nil {
		return nil, err
	}
	return sb.Config(name)
}

func (b *inCluster) ConfigOrDie(name string) *rest.Config {
	cfg, err := b.Config(name)
	if err != nil {
		panic(err)
	}
	return cfg
}

func (b *inCluster) Client(name string) (kubernetes.Interface, error) {
	sb, err := b.builder()
	if err != nil {
		return nil, err
	}
	return sb.Client(name)
}

func (b *inCluster) ClientOrDie(name string) kubernetes.Interface {
	c, err := b.Client(name)
	if err != nil {
		panic(err)
	}
	return c
}

// noAPI is the client builder of a plugin without Kubernetes API access.
type noAPI struct{ err error }

func (n noAPI) Config(string) (*rest.Config, error) { return nil, n.err }
func (n noAPI) ConfigOrDie(string) *rest.Config     { panic(n.err) }
func (n noAPI) Client(string) (kubernetes.Interface, error) {
	return nil, n.err
}
func (n noAPI) ClientOrDie(string) kubernetes.Interface { panic(n.err) }

// initializer initializes the provider on its first call for work, and
// again, with backoff, after a failed Initialize (a panic: no credentials
// yet, an API server not reachable) until it succeeds. Until then Probe
// reports the plugin not ready, so that Outrigger's readiness (and a probe
// of the plugin's container) says so instead of a plugin that fails every
// call for good while it looks healthy.
//
// No lock is held while anything runs: a call waits for a running
// Initialize, and for the provider's informers to sync, each on its own
// context, so a call gives up at its own deadline, not at another's.
type initializer struct {
	provider cloudprovider.Interface
	builder  cloudprovider.ControllerClientBuilder
	// stop ends what Initialize started, and the retries: when the server
	// stops.
	stop <-chan struct{}
	// backoff is the first delay before a retry, doubled up to maxBackoff.
	backoff, maxBackoff time.Duration

	mu sync.Mutex
	// started is set by the first call for work.
	started bool
	// attempt is closed when the running attempt ends.
	attempt chan struct{}
	// err is the last attempt's failure, nil once one succeeded.
	err     error
	ok      bool
	factory informers.SharedInformerFactory
	// attempts counts attempts, for tests and logs.
	attempts int
}

func newInitializer(p cloudprovider.Interface, b cloudprovider.ControllerClientBuilder, stop <-chan struct{}) *initializer {
	return &initializer{provider: p, builder: b, stop: stop, backoff: time.Second, maxBackoff: time.Minute}
}

// exempt are the calls that do not initialize the provider: a standby
// replica makes them too.
func exempt(fullMethod string) bool {
	for _, m := range []string{"/GetPluginInfo", "/GetCapabilities", "/Probe"} {
		if strings.HasSuffix(fullMethod, m) {
			return true
		}
	}
	return false
}

// ensure returns once the provider is initialized and its informers have
// synced, or with the reason it is not (in the Unavailable status Outrigger
// retries), or at ctx's end.
func (o *initializer) ensure(ctx context.Context) error {
	o.mu.Lock()
	if !o.started {
		o.started = true
		o.attempt = make(chan struct{})
		go o.run(klog.FromContext(ctx), o.attempt)
	}
	ok, err, attempt, factory := o.ok, o.err, o.attempt, o.factory
	if !ok && err == nil {
		// The first attempt runs: its outcome is this call's.
		o.mu.Unlock()
		select {
		case <-attempt:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		o.mu.Lock()
		ok, err, factory = o.ok, o.err, o.factory
	}
	o.mu.Unlock()
	if !ok {
		return status.Errorf(codes.Unavailable, "the provider is not initialized (retried with backoff): %v", err)
	}
	if factory != nil {
		// WaitForCacheSync returns as soon as ctx ends; many calls wait
		// at once, none behind another.
		for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
			if !synced {
				return status.Errorf(codes.Unavailable, "the provider's informer for %v has not synced", typ)
			}
		}
	}
	return nil
}

// run tries Initialize until it succeeds or the server stops, waiting
// backoff (doubling) between attempts.
func (o *initializer) run(log klog.Logger, attempt chan struct{}) {
	delay := o.backoff
	for {
		o.mu.Lock()
		if attempt == nil {
			attempt = make(chan struct{})
			o.attempt = attempt
		}
		o.attempts++
		n := o.attempts
		o.mu.Unlock()
		factory, err := o.initialize()
		o.mu.Lock()
		o.ok, o.err, o.factory = err == nil, err, factory
		close(attempt)
		attempt = nil
		o.mu.Unlock()
		if err == nil {
			if n > 1 {
				log.Info("Initialized the provider", "attempt", n)
			}
			return
		}
		log.Error(err, "Initializing the provider; retrying", "attempt", n, "retryIn", delay)
		select {
		case <-o.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, o.maxBackoff)
	}
}

// ready is Probe's answer: not ready while the last Initialize failed.
// Before the first call for work (a standby replica's plugin) it is ready,
// as nothing has failed.
func (o *initializer) ready() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ok && o.err != nil {
		return fmt.Errorf("the provider is not initialized (retried with backoff): %w", o.err)
	}
	return nil
}

func (o *initializer) initialize() (factory informers.SharedInformerFactory, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the provider's Initialize panicked: %v", r)
		}
	}()
	o.provider.Initialize(o.builder, o.stop)
	if user, ok := o.provider.(cloudprovider.InformerUser); ok {
		client, err := o.builder.Client("shared-informers")
		if err != nil {
			return nil, fmt.Errorf("informers for the provider: %w", err)
		}
		factory = informers.NewSharedInformerFactory(client, 0)
		user.SetInformers(factory)
		factory.Start(o.stop)
	}
	return factory, nil
}

func (o *initializer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !exempt(info.FullMethod) {
		if err := o.ensure(ctx); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (o *initializer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !exempt(info.FullMethod) {
		if err := o.ensure(ss.Context()); err != nil {
			return err
		}
	}
	return handler(srv, ss)
}
