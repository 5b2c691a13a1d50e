package manager

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// providerInit does what upstream does once it leads, before any controller
// starts: the provider's Initialize with a client builder, then, for
// providers that watch objects themselves (cloudprovider.InformerUser),
// SetInformers with a shared informer factory that it then starts. A
// replica that never leads never initializes its provider, as upstream.
type providerInit struct {
	provider cloudprovider.Interface
	name     string
	config   *rest.Config
	opts     *Options
	cluster  *clusterIdentity
	// informers are the manager's cache as a client-go factory.
	informers *sharedInformers
	done      chan struct{}
}

func newProviderInit(p cloudprovider.Interface, name string, cfg *rest.Config, opts *Options, cluster *clusterIdentity, informers *sharedInformers) *providerInit {
	return &providerInit{provider: p, name: name, config: cfg, opts: opts, cluster: cluster, informers: informers, done: make(chan struct{})}
}

func (p *providerInit) NeedLeaderElection() bool { return true }

func (p *providerInit) Start(ctx context.Context) error {
	log := klog.FromContext(ctx)
	// The identity is read (or refused for good) first: what the provider
	// makes from its first call on carries it.
	if err := p.cluster.wait(ctx); err != nil {
		return nil
	}
	p.provider.Initialize(p.clientBuilder(), ctx.Done())
	// After Initialize, as SetInformers: a provider may set up its clients
	// there. Now, or later when the identity was not readable at start.
	if c, ok := p.provider.(provider.ClusterIdentity); ok {
		p.cluster.subscribe(c.SetClusterID)
	}
	// A provider that watches objects itself gets the manager's cache,
	// which has started by now (this runs once leading).
	if user, ok := p.provider.(cloudprovider.InformerUser); ok {
		user.SetInformers(p.informers)
		p.informers.StartWithContext(ctx)
		if res := p.informers.WaitForCacheSyncWithContext(ctx); res.Err != nil && ctx.Err() == nil {
			return fmt.Errorf("the provider's informers: %w", res.Err)
		}
	}
	log.Info("Provider initialized", "provider", p.name)
	close(p.done)
	<-ctx.Done()
	return nil
}

// clientBuilder is what Initialize gets, as upstream hands it: with
// --use-service-account-credentials, clients of the ServiceAccount in
// kube-system each name asks for (created when missing), with tokens from
// the TokenRequest API, except the accounts of Outrigger's controllers
// that read Secrets; else clients of Outrigger's own identity. A
// provider's own main (package app) hands its own.
func (p *providerInit) clientBuilder() cloudprovider.ControllerClientBuilder {
	if ext := p.opts.Extension; ext != nil && ext.ClientBuilder != nil {
		return ext.ClientBuilder
	}
	if p.opts.UseServiceAccountCredentials {
		if core, err := kubernetes.NewForConfig(p.config); err == nil {
			return refusingBuilder{inner: clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(p.config), core.CoreV1(), "kube-system"), refused: secretReaders}
		}
	}
	return clientBuilder{p.config}
}

// refusingBuilder hands a provider the credentials of the ServiceAccount
// each name asks for, except those of Outrigger's own controllers that
// read Secrets (refused, by account, with the controller): a provider
// asking for "gateway-controller" would get the Secret rights the
// controller's account holds for its own work, not the provider's.
type refusingBuilder struct {
	inner   cloudprovider.ControllerClientBuilder
	refused map[string]string
}

func (b refusingBuilder) check(name string) error {
	if c, ok := b.refused[name]; ok {
		return fmt.Errorf("a provider's client builder does not hand out kube-system/%s: it is the %s's account, which reads Secrets; ask for a name of the provider's own and grant it what the provider needs", name, c)
	}
	return nil
}

func (b refusingBuilder) Config(name string) (*rest.Config, error) {
	if err := b.check(name); err != nil {
		return nil, err
	}
	return b.inner.Config(name)
}

func (b refusingBuilder) ConfigOrDie(name string) *rest.Config {
	if err := b.check(name); err != nil {
		panic(err)
	}
	return b.inner.ConfigOrDie(name)
}

func (b refusingBuilder) Client(name string) (kubernetes.Interface, error) {
	if err := b.check(name); err != nil {
		return nil, err
	}
	return b.inner.Client(name)
}

func (b refusingBuilder) ClientOrDie(name string) kubernetes.Interface {
	if err := b.check(name); err != nil {
		panic(err)
	}
	return b.inner.ClientOrDie(name)
}

// afterInit is the manager controllers are set up with: every runnable they
// add starts only once the provider is initialized.
type afterInit struct {
	manager.Manager
	done <-chan struct{}
}

func (m afterInit) Add(r manager.Runnable) error {
	return m.Manager.Add(&gatedRunnable{inner: r, done: m.done})
}

type gatedRunnable struct {
	inner manager.Runnable
	done  <-chan struct{}
}

func (g *gatedRunnable) Start(ctx context.Context) error {
	select {
	case <-g.done:
	case <-ctx.Done():
		return nil
	}
	return g.inner.Start(ctx)
}

func (g *gatedRunnable) NeedLeaderElection() bool {
	if le, ok := g.inner.(manager.LeaderElectionRunnable); ok {
		return le.NeedLeaderElection()
	}
	return true
}
