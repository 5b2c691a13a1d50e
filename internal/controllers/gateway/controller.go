package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// Name is the controller's name in --controllers.
const Name = "gateway-controller"

const (
	// Finalizer holds a Gateway until what Outrigger made for it (its load
	// balancer first) is gone.
	Finalizer = "gateway.outrigger.dev/cleanup"
	// GatewayLabel, GatewayNamespaceLabel and GatewayUIDLabel name, on
	// what Outrigger made for a Gateway, the Gateway it is for; the UID is
	// what proves it (a Gateway made again under the same name is another).
	GatewayLabel          = "gateway.outrigger.dev/name"
	GatewayNamespaceLabel = "gateway.outrigger.dev/namespace"
	GatewayUIDLabel       = "gateway.outrigger.dev/uid"
	// ConfigKey is the data plane's programming in its Secret.
	ConfigKey = dataplane.ConfigKey
	// templateHashAnnotation records, on a data plane Deployment, what its
	// pod template was made from.
	templateHashAnnotation = "gateway.outrigger.dev/template-hash"
	// DefaultNamespace is where data planes run unless told otherwise.
	DefaultNamespace = "outrigger-gateways"
	managedByLabel   = "app.kubernetes.io/managed-by"
	managedBy        = "outrigger"
	// certificateRecheck is how often a Gateway with HTTPS listeners reads
	// its certificate Secrets again (they are read, not watched, so that
	// Outrigger caches no Secrets of the cluster).
	certificateRecheck = time.Minute
	// missingSecretRecheck is how soon a certificate Secret that did not
	// exist is read again.
	missingSecretRecheck = 2 * time.Second
)

// Options configure the Gateway API controllers of one provider.
type Options struct {
	// ControllerName is the GatewayClass controllerName served.
	ControllerName gwv1.GatewayController
	// ClassName is a GatewayClass to create if missing ("" none).
	ClassName string
	// LoadBalancerClass is given to the Services made for Gateways, so the
	// service controller of the same provider and class serves them.
	LoadBalancerClass string
	// Provider names the provider in controller names and Events.
	Provider string
	// ProviderName is the provider's --cloud-provider name: which
	// annotation asks its load balancer for PROXY protocol
	// (proxyprotocol.go).
	ProviderName string
	// Namespace holds every Gateway's data plane in NamespaceShared mode:
	// its programming (a Secret), its load balancer (a Service) and its
	// pods. Outrigger writes nowhere else; it is made when missing.
	// Default DefaultNamespace. Unused in NamespaceGateway mode.
	Namespace string
	// NamespaceMode is where each Gateway's data plane is made: Namespace
	// (NamespaceShared, the default) or the Gateway's own namespace
	// (NamespaceGateway).
	NamespaceMode NamespaceMode
	// DataPlaneImage runs each Gateway's data plane as a Deployment of
	// this image (`outrigger gateway-dataplane`). Empty: no Deployment;
	// something else serves the programming (`outrigger dev` does, on its
	// simulated nodes).
	DataPlaneImage string
	// Cloud is the provider's own layer-7 load balancers
	// (provider.Gateways), through the cloud-call layer. With it, they
	// serve the Gateways and Outrigger runs no data plane; nil: the data
	// plane above, behind a load balancer Service.
	Cloud provider.GatewayLoadBalancer
	// ClusterName and ClusterID are handed to Cloud, which records them
	// with each load balancer.
	ClusterName string
	ClusterID   func() string
	// GRPCRoute serves GRPCRoutes: set where their CRD is served and the
	// controller may watch them. Unset, GRPCRoutes are neither watched nor
	// among the kinds HTTP listeners support.
	GRPCRoute bool
	// TLSRoute serves TLSRoutes (gateway.networking.k8s.io/v1, standard
	// since v1.5), as GRPCRoute: unset, they are neither watched nor
	// supported by TLS listeners, and TLS listeners serve nothing.
	TLSRoute bool
	// BackendTLSPolicy serves BackendTLSPolicies (standard since v1.4),
	// as GRPCRoute: unset, they are neither watched nor applied, and
	// their features are not claimed.
	BackendTLSPolicy bool
	// ListenerSet serves ListenerSets (standard since v1.5), as
	// GRPCRoute: unset, they are neither watched nor attached, and a
	// parentRef naming one matches nothing.
	ListenerSet bool
	// HTTPRouteRetry states the retry features: set where the HTTPRoute
	// CRD keeps rules[].retry (the experimental channel's). The data
	// plane serves a retry stanza either way; without the field there is
	// none to serve.
	HTTPRouteRetry bool
	// Parameters reads the ConfigMaps that parametersRefs name (those
	// labelled ParametersLabel): set where the controller may watch
	// ConfigMaps. Unset, a class or Gateway naming one is refused
	// (InvalidParameters), as an older RBAC allows nothing else.
	Parameters bool
}

func (o Options) name(base string) string {
	if o.Provider == "" {
		return base
	}
	return base + "-" + strings.NewReplacer("/", "-", ".", "-").Replace(o.Provider)
}

// ControllerNameFor is the GatewayClass controllerName of a provider and
// load balancer class.
func ControllerNameFor(provider, class string) gwv1.GatewayController {
	name := "outrigger.dev/" + provider
	if class != "" {
		name += "/" + class
	}
	return gwv1.GatewayController(name)
}

// ClassNameFor is the GatewayClass Outrigger creates for a provider and
// load balancer class.
func ClassNameFor(provider, class string) string {
	name := "outrigger-" + provider
	if class != "" {
		sum := sha256.Sum256([]byte(class))
		name += "-" + hex.EncodeToString(sum[:4])
	}
	return name
}

// DataPlaneName is the name of the Secret, Service and Deployment made for
// the Gateway namespace/name: readable, and unique by a hash of both (in
// a shared namespace, Gateways of many namespaces meet; the same name
// serves in the Gateway's own namespace).
func DataPlaneName(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	base := namespace + "-" + name
	if len(base) > 54 {
		base = base[:54]
	}
	return strings.TrimSuffix(base, "-") + "-" + hex.EncodeToString(sum[:4])
}

// The Gateway API's types join client-go's scheme when the process starts,
// as client-go's own do: registering them later would write a map other
// goroutines (Event sinks, caches) read.
func init() {
	utilruntime.Must(gwv1.Install(clientgoscheme.Scheme))
}

type reconciler struct {
	client client.Client
	// reader reads certificate Secrets from the API (never cached), each
	// read waiting for secretReads (nil: no wait).
	reader      client.Reader
	secretReads *rate.Limiter
	// own reads what Outrigger made, from a cache holding only objects
	// labeled as Outrigger's: of the data plane namespace, or of every
	// namespace in NamespaceGateway mode (ownCacheOptions).
	own      client.Reader
	recorder record.EventRecorder
	opts     Options
	// kinds are the route kinds served.
	kinds []*routeKind
	// serving is how this provider's Gateways are served, chosen once in
	// Setup: Outrigger's data plane, or the cloud's own load balancers.
	serving serving
	// params reads the parameters ConfigMaps (nil: not watched).
	params client.Reader
}

// Setup adds the GatewayClass and Gateway controllers to mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.NamespaceMode == "" {
		opts.NamespaceMode = NamespaceShared
	}
	if _, err := ParseNamespaceMode(string(opts.NamespaceMode)); err != nil {
		return err
	}
	// Registered at init in client-go's scheme, the managers' default;
	// another scheme gets them here, before its manager runs.
	if !mgr.GetScheme().Recognizes(schema.GroupVersionKind{Group: gwv1.GroupName, Version: gwv1.GroupVersion.Version, Kind: kindGateway}) {
		if err := gwv1.Install(mgr.GetScheme()); err != nil {
			return fmt.Errorf("registering Gateway API types: %w", err)
		}
	}
	ownOpts, err := opts.ownCacheOptions()
	if err != nil {
		return err
	}
	ownOpts.Scheme, ownOpts.Mapper, ownOpts.DefaultTransform = mgr.GetScheme(), mgr.GetRESTMapper(), cache.TransformStripManagedFields()
	own, err := cache.New(mgr.GetConfig(), ownOpts)
	if err != nil {
		return fmt.Errorf("cache of the data planes (%s mode): %w", opts.NamespaceMode, err)
	}
	if err := mgr.Add(own); err != nil {
		return err
	}
	r := &reconciler{
		client: mgr.GetClient(),
		reader: mgr.GetAPIReader(),
		// Certificate reads are the one read per Gateway that is not
		// from a cache: however many Gateways name Secrets, and however
		// often their missing ones are looked for, the API server sees
		// at most this many a second.
		secretReads: rate.NewLimiter(secretReadsPerSecond, secretReadsBurst),
		own:         own,
		recorder:    mgr.GetEventRecorderFor(opts.name(Name)), //nolint:staticcheck // the core/v1 Events upstream's controllers write
		opts:        opts,
		kinds:       servedKinds(opts.GRPCRoute, opts.TLSRoute),
	}
	if opts.Cloud != nil {
		r.serving = &cloudServing{r: r, lb: opts.Cloud}
	} else {
		r.serving = &dataPlaneServing{r: r, mode: opts.NamespaceMode}
	}
	var params cache.Cache
	if opts.Parameters {
		if params, err = newParametersCache(mgr); err != nil {
			return err
		}
		r.params = params
	}
	if err := setupClass(mgr, opts, r.serving, params); err != nil {
		return err
	}
	if err := r.serving.setup(mgr); err != nil {
		return err
	}
	return r.watch(mgr, own, params)
}

// Reconcile gathers what a Gateway refers to, compiles it, has it served
// and writes the statuses.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gw gwv1.Gateway
	if err := r.client.Get(ctx, req.NamespacedName, &gw); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	class, err := r.ours(ctx, &gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if class == nil || !gw.DeletionTimestamp.IsZero() {
		// Not (or no longer) ours: undo only what the finalizer says
		// Outrigger made.
		if !controllerutil.ContainsFinalizer(&gw, Finalizer) {
			return reconcile.Result{}, nil
		}
		return r.cleanup(ctx, &gw)
	}
	if err := r.addFinalizer(ctx, &gw); err != nil {
		return reconcile.Result{}, err
	}

	w, err := r.gather(ctx, &gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.gatherPolicies(ctx, w); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.gatherParameters(ctx, w, class); err != nil {
		return reconcile.Result{}, err
	}
	if w.refused, err = r.serving.refused(ctx, &gw); err != nil {
		return reconcile.Result{}, err
	}
	res := compile(w)
	var f front
	switch {
	case res.accepted.Reason == string(gwv1.GatewayReasonInvalidParameters):
		// A setting mistyped in a ConfigMap, perhaps the class's and so
		// every Gateway's of the class: what serves each stays as it was
		// (its load balancer and address, its last programming) until the
		// parameters are fixed. A Gateway never served gets nothing.
		f, err = r.serving.keep(ctx, &gw, "its parameters are invalid (see Accepted): nothing new is programmed, what serves it stays as it was")
	case res.accepted.Status == metav1.ConditionFalse:
		// Not accepted otherwise: nothing is programmed, no load balancer
		// kept.
		res.ports = nil
		f, err = r.serving.serve(ctx, &gw, w, res)
	default:
		f, err = r.serving.serve(ctx, &gw, w, res)
	}
	if err != nil || f.wait {
		return reconcile.Result{}, err
	}
	if err := r.writeRouteStatuses(ctx, &gw, w, res); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writePolicyStatuses(ctx, &gw, w, res); err != nil {
		return reconcile.Result{}, err
	}
	programmed, err := r.writeGatewayStatus(ctx, &gw, res, f)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeListenerSetStatuses(ctx, w, res, programmed); err != nil {
		return reconcile.Result{}, err
	}
	if f.retry != nil {
		return reconcile.Result{}, f.retry
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Gateway reconciled", "programmed", programmed)
	return recheck(&gw, res), nil
}

// recheck is when to read a reconciled Gateway's certificates (its
// listeners' and its backend client certificate, and its backends' CA
// ConfigMaps) again: they are read, not watched, so one made
// or renewed after its Gateway is seen at the next read.
func recheck(gw *gwv1.Gateway, res *result) reconcile.Result {
	if res.missingSecrets {
		return reconcile.Result{RequeueAfter: missingSecretRecheck}
	}
	if res.backendCA {
		return reconcile.Result{RequeueAfter: backendCARecheck}
	}
	if res.backendClient || res.setCertificates || slices.ContainsFunc(gw.Spec.Listeners, func(l gwv1.Listener) bool { return l.Protocol == gwv1.HTTPSProtocolType }) {
		return reconcile.Result{RequeueAfter: certificateRecheck}
	}
	return reconcile.Result{}
}

// ours says whether the Gateway's class names Outrigger's controller.
func (r *reconciler) ours(ctx context.Context, gw *gwv1.Gateway) (*gwv1.GatewayClass, error) {
	var gc gwv1.GatewayClass
	if err := r.client.Get(ctx, types.NamespacedName{Name: string(gw.Spec.GatewayClassName)}, &gc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if gc.Spec.ControllerName != r.opts.ControllerName {
		return nil, nil
	}
	return &gc, nil
}

// addFinalizer holds the Gateway, before anything is made for it, until
// cleanup has undone it.
func (r *reconciler) addFinalizer(ctx context.Context, gw *gwv1.Gateway) error {
	if controllerutil.ContainsFinalizer(gw, Finalizer) {
		return nil
	}
	patch := client.MergeFrom(gw.DeepCopy())
	controllerutil.AddFinalizer(gw, Finalizer)
	if err := r.client.Patch(ctx, gw, patch); err != nil {
		return fmt.Errorf("adding finalizer: %w", err)
	}
	return nil
}

// cleanup deletes what Outrigger made for a Gateway (its data plane, or
// the cloud's own load balancer), then lets the Gateway go.
func (r *reconciler) cleanup(ctx context.Context, gw *gwv1.Gateway) (reconcile.Result, error) {
	if gone, err := r.serving.remove(ctx, gw); err != nil || !gone {
		// The Service's deletion brings this Gateway back.
		return reconcile.Result{}, err
	}
	// Routes lose this Gateway's entries.
	w, err := r.gather(ctx, gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeRouteStatuses(ctx, gw, w, &result{routeParents: map[routeKey][]gwv1.RouteParentStatus{}}); err != nil {
		return reconcile.Result{}, err
	}
	// So do BackendTLSPolicies.
	if err := r.gatherPolicies(ctx, w); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writePolicyStatuses(ctx, gw, w, &result{}); err != nil {
		return reconcile.Result{}, err
	}
	if !gw.DeletionTimestamp.IsZero() {
		if err := r.writeListenerSetStatuses(ctx, w, &result{sets: detachedSets(w)}, false); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch := client.MergeFrom(gw.DeepCopy())
	controllerutil.RemoveFinalizer(gw, Finalizer)
	if err := r.client.Patch(ctx, gw, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return reconcile.Result{}, nil
}
