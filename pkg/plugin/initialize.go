package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"

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
	// which runs once, on the first call that asks the provider for work
	// (anything but GetPluginInfo, GetCapabilities and Probe). Only a
	// leading Outrigger makes such calls, so the provider initializes where
	// its controllers run, as in upstream's CCM, and a standby replica's
	// plugin never does. A provider that watches objects
	// (cloudprovider.InformerUser) gets a shared informer factory from it,
	// started and synced before the call goes on. Nil: Initialize is not
	// called.
	ClientBuilder cloudprovider.ControllerClientBuilder
}

// ClientBuilderFor is the client builder of a plugin's Kubernetes access:
// the kubeconfig at path, else the pod's ServiceAccount. Without either it
// is a builder whose clients fail with an error that says so (a provider
// that needs none never notices).
func ClientBuilderFor(path string) cloudprovider.ControllerClientBuilder {
	var (
		cfg *rest.Config
		err error
	)
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		what := "no --kubeconfig given and no ServiceAccount token mounted"
		if path != "" {
			what = "--kubeconfig " + path
		}
		return noAPI{err: fmt.Errorf("the plugin has no Kubernetes API access (%s): %w", what, err)}
	}
	return clientbuilder.SimpleControllerClientBuilder{ClientConfig: cfg}
}

// noAPI is the client builder of a plugin without Kubernetes API access.
type noAPI struct{ err error }

func (n noAPI) Config(string) (*rest.Config, error) { return nil, n.err }
func (n noAPI) ConfigOrDie(string) *rest.Config     { panic(n.err) }
func (n noAPI) Client(string) (kubernetes.Interface, error) {
	return nil, n.err
}
func (n noAPI) ClientOrDie(string) kubernetes.Interface { panic(n.err) }

// initOnce initializes the provider on its first call for work.
type initOnce struct {
	provider cloudprovider.Interface
	builder  cloudprovider.ControllerClientBuilder
	// stop ends what Initialize started: when the server stops.
	stop <-chan struct{}

	mu      sync.Mutex
	done    bool
	err     error
	factory informers.SharedInformerFactory
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

// ensure initializes the provider once; a panic in Initialize is an error
// every later call gets, in the Unavailable status Outrigger retries.
func (o *initOnce) ensure(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		o.done = true
		o.err = o.initialize()
		if o.err != nil {
			klog.FromContext(ctx).Error(o.err, "Initializing the provider")
		}
	}
	if o.err != nil {
		return status.Error(codes.FailedPrecondition, o.err.Error())
	}
	if o.factory != nil {
		for typ, ok := range o.factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return status.Errorf(codes.Unavailable, "the provider's informer for %v has not synced", typ)
			}
		}
	}
	return nil
}

func (o *initOnce) initialize() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the provider's Initialize panicked: %v", r)
		}
	}()
	o.provider.Initialize(o.builder, o.stop)
	if user, ok := o.provider.(cloudprovider.InformerUser); ok {
		client, err := o.builder.Client("shared-informers")
		if err != nil {
			return fmt.Errorf("informers for the provider: %w", err)
		}
		o.factory = informers.NewSharedInformerFactory(client, 0)
		user.SetInformers(o.factory)
		o.factory.Start(o.stop)
	}
	return nil
}

func (o *initOnce) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !exempt(info.FullMethod) {
		if err := o.ensure(ctx); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (o *initOnce) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !exempt(info.FullMethod) {
		if err := o.ensure(ss.Context()); err != nil {
			return err
		}
	}
	return handler(srv, ss)
}
