package manager

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/lifecycle"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sharedInformers is a client-go SharedInformerFactory whose informers are
// the manager's own cache: a provider (cloudprovider.InformerUser, or a
// provider controller reading ControllerContext.InformerFactory) watches the
// same Nodes and Services Outrigger's controllers do, instead of caching
// every object a second time. Objects arrive as Outrigger caches them:
// without managedFields, and Nodes without status.images.
//
// A type the manager's scheme does not know (none of client-go's) or a
// call with a namespace or list tweak would need an informer of its own:
// those come from an ordinary factory, started with Start.
type sharedInformers struct {
	cache    cache.Cache
	scheme   *runtime.Scheme
	fallback informers.SharedInformerFactory

	mu   sync.Mutex
	made map[reflect.Type]toolscache.SharedIndexInformer
}

var _ informers.SharedInformerFactory = (*sharedInformers)(nil)

func newSharedInformers(c cache.Cache, scheme *runtime.Scheme, client kubernetes.Interface) *sharedInformers {
	return &sharedInformers{
		cache:    c,
		scheme:   scheme,
		fallback: informers.NewSharedInformerFactory(client, 0),
		made:     map[reflect.Type]toolscache.SharedIndexInformer{},
	}
}

// InformerFor returns the cache's informer for obj's type.
func (f *sharedInformers) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) toolscache.SharedIndexInformer {
	typ := reflect.TypeOf(obj)
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.made[typ]; ok {
		return inf
	}
	inf := f.fromCache(obj)
	if inf == nil {
		inf = f.fallback.InformerFor(obj, newFunc)
	}
	f.made[typ] = inf
	return inf
}

// fromCache is the manager cache's informer for obj's type, or nil.
func (f *sharedInformers) fromCache(obj runtime.Object) toolscache.SharedIndexInformer {
	cobj, ok := obj.(client.Object)
	if !ok {
		return nil
	}
	if _, _, err := f.scheme.ObjectKinds(obj); err != nil {
		return nil
	}
	// Never blocks: before the cache starts it only registers the
	// informer, which starts with the cache.
	inf, err := f.cache.GetInformer(context.Background(), cobj, cache.BlockUntilSynced(false))
	if err != nil {
		klog.Background().Error(err, "Informer from the shared cache; using one of its own", "type", fmt.Sprintf("%T", obj))
		return nil
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil
	}
	return sii
}

// InformerName names no informer for metrics, as a factory made without
// informers.WithInformerName.
func (f *sharedInformers) InformerName() *toolscache.InformerName { return nil }

// Start starts the informers of the fallback factory; the cache's run with
// the manager.
func (f *sharedInformers) Start(stopCh <-chan struct{}) { f.fallback.Start(stopCh) }

func (f *sharedInformers) StartWithContext(ctx context.Context) { f.fallback.StartWithContext(ctx) }

func (f *sharedInformers) Shutdown() { f.fallback.Shutdown() }

// WaitForCacheSync waits for every informer handed out.
func (f *sharedInformers) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	return f.WaitForCacheSyncWithContext(wait.ContextForChannel(stopCh)).Synced
}

func (f *sharedInformers) WaitForCacheSyncWithContext(ctx context.Context) toolscache.SyncResult {
	f.mu.Lock()
	made := maps.Clone(f.made)
	f.mu.Unlock()
	res := toolscache.SyncResult{Synced: map[reflect.Type]bool{}}
	var pending []string
	for t, inf := range made {
		res.Synced[t] = toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
		if !res.Synced[t] {
			pending = append(pending, t.String())
		}
	}
	if len(pending) > 0 {
		res.Err = fmt.Errorf("informers not synced (%s): %w", strings.Join(pending, ", "), context.Cause(ctx))
	}
	return res
}

// ForResource serves the generic informers of the fallback factory: they
// are looked up by resource, which the cache does not index by.
func (f *sharedInformers) ForResource(resource schema.GroupVersionResource) (informers.GenericInformer, error) {
	return f.fallback.ForResource(resource)
}

// The API groups: each hands its informers' construction back to
// InformerFor of this factory.
func (f *sharedInformers) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(f, "", nil)
}
func (f *sharedInformers) Internal() apiserverinternal.Interface {
	return apiserverinternal.New(f, "", nil)
}
func (f *sharedInformers) Apps() apps.Interface                 { return apps.New(f, "", nil) }
func (f *sharedInformers) Autoscaling() autoscaling.Interface   { return autoscaling.New(f, "", nil) }
func (f *sharedInformers) Batch() batch.Interface               { return batch.New(f, "", nil) }
func (f *sharedInformers) Certificates() certificates.Interface { return certificates.New(f, "", nil) }
func (f *sharedInformers) Coordination() coordination.Interface { return coordination.New(f, "", nil) }
func (f *sharedInformers) Core() core.Interface                 { return core.New(f, "", nil) }
func (f *sharedInformers) Discovery() discovery.Interface       { return discovery.New(f, "", nil) }
func (f *sharedInformers) Events() events.Interface             { return events.New(f, "", nil) }
func (f *sharedInformers) Extensions() extensions.Interface     { return extensions.New(f, "", nil) }
func (f *sharedInformers) Flowcontrol() flowcontrol.Interface   { return flowcontrol.New(f, "", nil) }
func (f *sharedInformers) Lifecycle() lifecycle.Interface       { return lifecycle.New(f, "", nil) }
func (f *sharedInformers) Networking() networking.Interface     { return networking.New(f, "", nil) }
func (f *sharedInformers) Node() node.Interface                 { return node.New(f, "", nil) }
func (f *sharedInformers) Policy() policy.Interface             { return policy.New(f, "", nil) }
func (f *sharedInformers) Rbac() rbac.Interface                 { return rbac.New(f, "", nil) }
func (f *sharedInformers) Resource() resource.Interface         { return resource.New(f, "", nil) }
func (f *sharedInformers) Scheduling() scheduling.Interface     { return scheduling.New(f, "", nil) }
func (f *sharedInformers) Storage() storage.Interface           { return storage.New(f, "", nil) }
func (f *sharedInformers) Storagemigration() storagemigration.Interface {
	return storagemigration.New(f, "", nil)
}
