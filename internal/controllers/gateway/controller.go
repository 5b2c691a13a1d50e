package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/controllers/service"
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
	// DefaultDataPlaneServiceAccount is the data plane pods' identity: it
	// may read the Secrets of the data plane namespace, nothing else.
	DefaultDataPlaneServiceAccount = "outrigger-gateway-dataplane"
	managedByLabel                 = "app.kubernetes.io/managed-by"
	managedBy                      = "outrigger"
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
	// Namespace holds every Gateway's data plane: its programming (a
	// Secret), its load balancer (a Service) and its pods. Outrigger writes
	// nowhere else; it is made when missing. Default DefaultNamespace.
	Namespace string
	// DataPlaneImage runs each Gateway's data plane as a Deployment of
	// this image (`outrigger gateway-dataplane`). Empty: no Deployment;
	// something else serves the programming (`outrigger dev` does, on its
	// simulated nodes).
	DataPlaneImage string
	// DataPlaneServiceAccount is the pods' ServiceAccount. Default
	// DefaultDataPlaneServiceAccount.
	DataPlaneServiceAccount string
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
// the Gateway namespace/name: readable, and unique by a hash of both.
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
	// reader reads certificate Secrets from the API (never cached).
	reader client.Reader
	// own reads what Outrigger made, from a cache of the data plane
	// namespace holding only objects labeled as Outrigger's.
	own      client.Reader
	recorder record.EventRecorder
	opts     Options
	// applied is what Cloud was last given, per Gateway.
	applied applied
}

// Setup adds the GatewayClass and Gateway controllers to mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.DataPlaneServiceAccount == "" {
		opts.DataPlaneServiceAccount = DefaultDataPlaneServiceAccount
	}
	// Registered at init in client-go's scheme, the managers' default;
	// another scheme gets them here, before its manager runs.
	if !mgr.GetScheme().Recognizes(schema.GroupVersionKind{Group: gwv1.GroupName, Version: gwv1.GroupVersion.Version, Kind: kindGateway}) {
		if err := gwv1.Install(mgr.GetScheme()); err != nil {
			return fmt.Errorf("registering Gateway API types: %w", err)
		}
	}
	if err := setupClass(mgr, opts); err != nil {
		return err
	}
	own, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultNamespaces:    map[string]cache.Config{opts.Namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{managedByLabel: managedBy}),
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("cache of namespace %s: %w", opts.Namespace, err)
	}
	if err := mgr.Add(own); err != nil {
		return err
	}
	r := &reconciler{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		own:      own,
		recorder: mgr.GetEventRecorderFor(opts.name(Name)), //nolint:staticcheck // the core/v1 Events upstream's controllers write
		opts:     opts,
	}
	if opts.Cloud == nil {
		if err := mgr.Add(leaderRunnable(func(ctx context.Context) error { return r.ensureNamespace(ctx) })); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if opts.DataPlaneImage != "" {
		b = b.WatchesRawSource(source.Kind(own, client.Object(&appsv1.Deployment{}), handler.EnqueueRequestsFromMapFunc(r.gatewayOf)))
	}
	if opts.GRPCRoute {
		b = b.Watches(&gwv1.GRPCRoute{}, handler.EnqueueRequestsFromMapFunc(r.parentsOf))
	}
	return b.
		Named(opts.name(Name)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		For(&gwv1.Gateway{}).
		Watches(&gwv1.GatewayClass{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfClass)).
		Watches(&gwv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(r.parentsOf)).
		Watches(&gwv1.TCPRoute{}, handler.EnqueueRequestsFromMapFunc(r.parentsOf)).
		Watches(&gwv1.UDPRoute{}, handler.EnqueueRequestsFromMapFunc(r.parentsOf)).
		Watches(&gwv1.ReferenceGrant{}, handler.EnqueueRequestsFromMapFunc(r.allGateways)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.allGateways)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.gatewaysOfService)).
		Complete(r)
}

// ensureNamespace makes the data plane namespace when it is missing.
func (r *reconciler) ensureNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.opts.Namespace, Labels: map[string]string{managedByLabel: managedBy}}}
	if err := r.client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the data plane namespace %s: %w", r.opts.Namespace, err)
	}
	return nil
}

// gatewayOf maps an object Outrigger made to its Gateway.
func (r *reconciler) gatewayOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[managedByLabel] != managedBy || l[GatewayLabel] == "" || o.GetNamespace() != r.opts.Namespace {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[GatewayNamespaceLabel], Name: l[GatewayLabel]}}}
}

func (r *reconciler) gatewaysOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	var gws gwv1.GatewayList
	if err := r.client.List(ctx, &gws); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, gw := range gws.Items {
		if string(gw.Spec.GatewayClassName) == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
		}
	}
	return out
}

func (r *reconciler) allGateways(ctx context.Context, _ client.Object) []reconcile.Request {
	var gws gwv1.GatewayList
	if err := r.client.List(ctx, &gws); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(gws.Items))
	for _, gw := range gws.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gw)})
	}
	return out
}

// parentsOf is the Gateways a route names now, and those whose status it
// still carries from Outrigger (so a removed parentRef is cleaned up).
func (r *reconciler) parentsOf(_ context.Context, o client.Object) []reconcile.Request {
	parents, status := routeParents(o)
	seen := map[types.NamespacedName]bool{}
	add := func(ref gwv1.ParentReference) {
		if (ref.Group != nil && *ref.Group != groupGateway) || (ref.Kind != nil && *ref.Kind != kindGateway) {
			return
		}
		ns := o.GetNamespace()
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		seen[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}] = true
	}
	for _, p := range parents {
		add(p)
	}
	for _, s := range status {
		if s.ControllerName == r.opts.ControllerName {
			add(s.ParentRef)
		}
	}
	out := make([]reconcile.Request, 0, len(seen))
	for k := range seen {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	return out
}

func routeParents(o client.Object) ([]gwv1.ParentReference, []gwv1.RouteParentStatus) {
	switch rt := o.(type) {
	case *gwv1.HTTPRoute:
		return rt.Spec.ParentRefs, rt.Status.Parents
	case *gwv1.GRPCRoute:
		return rt.Spec.ParentRefs, rt.Status.Parents
	case *gwv1.TCPRoute:
		return rt.Spec.ParentRefs, rt.Status.Parents
	case *gwv1.UDPRoute:
		return rt.Spec.ParentRefs, rt.Status.Parents
	}
	return nil, nil
}

// gatewaysOfService maps a Service to the Gateway it fronts, or to the
// Gateways whose routes send traffic to it.
func (r *reconciler) gatewaysOfService(ctx context.Context, o client.Object) []reconcile.Request {
	if own := r.gatewayOf(ctx, o); own != nil {
		return own
	}
	var out []reconcile.Request
	refers := func(route client.Object, refs []gwv1.BackendObjectReference) {
		for _, ref := range refs {
			ns := route.GetNamespace()
			if ref.Namespace != nil {
				ns = string(*ref.Namespace)
			}
			if ns == o.GetNamespace() && string(ref.Name) == o.GetName() {
				out = append(out, r.parentsOf(ctx, route)...)
				return
			}
		}
	}
	for _, route := range r.allRoutes(ctx) {
		refers(route, backendRefs(route))
	}
	return out
}

// allRoutes lists the cached routes of every kind served.
func (r *reconciler) allRoutes(ctx context.Context) []client.Object {
	var out []client.Object
	var hrs gwv1.HTTPRouteList
	if err := r.client.List(ctx, &hrs); err == nil {
		for i := range hrs.Items {
			out = append(out, &hrs.Items[i])
		}
	}
	if r.opts.GRPCRoute {
		var grs gwv1.GRPCRouteList
		if err := r.client.List(ctx, &grs); err == nil {
			for i := range grs.Items {
				out = append(out, &grs.Items[i])
			}
		}
	}
	var trs gwv1.TCPRouteList
	if err := r.client.List(ctx, &trs); err == nil {
		for i := range trs.Items {
			out = append(out, &trs.Items[i])
		}
	}
	var urs gwv1.UDPRouteList
	if err := r.client.List(ctx, &urs); err == nil {
		for i := range urs.Items {
			out = append(out, &urs.Items[i])
		}
	}
	return out
}

// backendRefs are the backends a route of any kind names.
func backendRefs(o client.Object) []gwv1.BackendObjectReference {
	var refs []gwv1.BackendObjectReference
	switch rt := o.(type) {
	case *gwv1.HTTPRoute:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	case *gwv1.GRPCRoute:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	case *gwv1.TCPRoute:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	case *gwv1.UDPRoute:
		for _, rule := range rt.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
	}
	return refs
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
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
	if !controllerutil.ContainsFinalizer(&gw, Finalizer) {
		patch := client.MergeFrom(gw.DeepCopy())
		controllerutil.AddFinalizer(&gw, Finalizer)
		if err := r.client.Patch(ctx, &gw, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	w, err := r.gather(ctx, &gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	w.classParameters = class.Spec.ParametersRef != nil
	if r.opts.Cloud == nil {
		if w.refused, err = r.refusedProtocols(ctx, &gw); err != nil {
			return reconcile.Result{}, err
		}
	}
	res := compile(w)
	if res.accepted.Status == metav1.ConditionFalse {
		// Not accepted: nothing is programmed, no load balancer kept.
		res.ports = nil
	}

	if r.opts.Cloud != nil {
		return r.reconcileCloud(ctx, &gw, w, res)
	}
	if err := r.writeConfig(ctx, &gw, &res.config); err != nil {
		r.recorder.Eventf(&gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Error programming the data plane: %v", err)
		return reconcile.Result{}, err
	}
	svc, err := r.ensureService(ctx, &gw, res.ports)
	if err != nil {
		r.recorder.Eventf(&gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "Error syncing the load balancer's Service: %v", err)
		return reconcile.Result{}, err
	}
	if split, err := r.recordRefusal(ctx, &gw, svc, w.refused); err != nil || split {
		// The Service's change brings the Gateway back.
		return reconcile.Result{}, err
	}
	dataPlaneReady := true
	if svc != nil {
		if dataPlaneReady, err = r.ensureDataPlane(ctx, &gw, res.ports); err != nil {
			r.recorder.Eventf(&gw, corev1.EventTypeWarning, "DataPlaneSyncFailed", "Error syncing the data plane Deployment: %v", err)
			return reconcile.Result{}, err
		}
	}
	if err := r.writeRouteStatuses(ctx, &gw, w, res); err != nil {
		return reconcile.Result{}, err
	}
	programmed, err := r.writeGatewayStatus(ctx, &gw, res, serviceFront(svc, dataPlaneReady))
	if err != nil {
		return reconcile.Result{}, err
	}
	log.V(4).Info("Gateway reconciled", "programmed", programmed)
	return recheck(&gw, w), nil
}

// recheck is when to read a reconciled Gateway's certificates again:
// Secrets are read, not watched, so one made or renewed after its Gateway
// is seen at the next read.
func recheck(gw *gwv1.Gateway, w *world) reconcile.Result {
	if w.missingSecrets {
		return reconcile.Result{RequeueAfter: missingSecretRecheck}
	}
	if slices.ContainsFunc(gw.Spec.Listeners, func(l gwv1.Listener) bool { return l.Protocol == gwv1.HTTPSProtocolType }) {
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

// gather reads from the cache (certificates from the API) what compiling
// the Gateway needs.
func (r *reconciler) gather(ctx context.Context, gw *gwv1.Gateway) (*world, error) {
	w := &world{
		controller: r.opts.ControllerName,
		grpc:       r.opts.GRPCRoute,
		gateway:    gw,
		services:   map[types.NamespacedName]*corev1.Service{},
		secrets:    map[types.NamespacedName]*corev1.Secret{},
		namespaces: map[string]*corev1.Namespace{},
	}
	names := func(o client.Object) bool {
		parents, status := routeParents(o)
		for _, p := range parents {
			if refersTo(p, o.GetNamespace(), gw) {
				return true
			}
		}
		for _, s := range status {
			if s.ControllerName == r.opts.ControllerName && refersTo(s.ParentRef, o.GetNamespace(), gw) {
				return true
			}
		}
		return false
	}
	var hrs gwv1.HTTPRouteList
	if err := r.client.List(ctx, &hrs); err != nil {
		return nil, fmt.Errorf("listing HTTPRoutes: %w", err)
	}
	for i := range hrs.Items {
		if names(&hrs.Items[i]) {
			w.httpRoutes = append(w.httpRoutes, &hrs.Items[i])
		}
	}
	if r.opts.GRPCRoute {
		var grs gwv1.GRPCRouteList
		if err := r.client.List(ctx, &grs); err != nil {
			return nil, fmt.Errorf("listing GRPCRoutes: %w", err)
		}
		for i := range grs.Items {
			if names(&grs.Items[i]) {
				w.grpcRoutes = append(w.grpcRoutes, &grs.Items[i])
			}
		}
	}
	var trs gwv1.TCPRouteList
	if err := r.client.List(ctx, &trs); err != nil {
		return nil, fmt.Errorf("listing TCPRoutes: %w", err)
	}
	for i := range trs.Items {
		if names(&trs.Items[i]) {
			w.tcpRoutes = append(w.tcpRoutes, &trs.Items[i])
		}
	}
	var urs gwv1.UDPRouteList
	if err := r.client.List(ctx, &urs); err != nil {
		return nil, fmt.Errorf("listing UDPRoutes: %w", err)
	}
	for i := range urs.Items {
		if names(&urs.Items[i]) {
			w.udpRoutes = append(w.udpRoutes, &urs.Items[i])
		}
	}
	var grants gwv1.ReferenceGrantList
	if err := r.client.List(ctx, &grants); err != nil {
		return nil, fmt.Errorf("listing ReferenceGrants: %w", err)
	}
	for i := range grants.Items {
		w.grants = append(w.grants, &grants.Items[i])
	}
	var nss corev1.NamespaceList
	if err := r.client.List(ctx, &nss); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nss.Items {
		w.namespaces[nss.Items[i].Name] = &nss.Items[i]
	}
	// Services the routes name.
	addService := func(routeNS string, ref gwv1.BackendObjectReference) error {
		ns := routeNS
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		key := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
		if _, ok := w.services[key]; ok {
			return nil
		}
		var svc corev1.Service
		if err := r.client.Get(ctx, key, &svc); err != nil {
			return client.IgnoreNotFound(err)
		}
		w.services[key] = &svc
		return nil
	}
	var errs []error
	var routes []client.Object
	for _, hr := range w.httpRoutes {
		routes = append(routes, hr)
	}
	for _, gr := range w.grpcRoutes {
		routes = append(routes, gr)
	}
	for _, tr := range w.tcpRoutes {
		routes = append(routes, tr)
	}
	for _, ur := range w.udpRoutes {
		routes = append(routes, ur)
	}
	for _, route := range routes {
		for _, ref := range backendRefs(route) {
			errs = append(errs, addService(route.GetNamespace(), ref))
		}
	}
	// Certificates, read from the API: Outrigger caches no Secrets.
	for _, l := range gw.Spec.Listeners {
		if l.TLS == nil {
			continue
		}
		for _, ref := range l.TLS.CertificateRefs {
			ns := gw.Namespace
			if ref.Namespace != nil {
				ns = string(*ref.Namespace)
			}
			key := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
			var s corev1.Secret
			if err := r.reader.Get(ctx, key, &s); err != nil {
				if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
					errs = append(errs, fmt.Errorf("reading certificate Secret %s: %w", key, err))
				}
				continue
			}
			w.secrets[key] = &s
		}
	}
	return w, errors.Join(errs...)
}

// writeConfig stores the data plane's programming in the Gateway's Secret.
func (r *reconciler) writeConfig(ctx context.Context, gw *gwv1.Gateway, cfg interface{ Marshal() ([]byte, error) }) error {
	data, err := cfg.Marshal()
	if err != nil {
		return err
	}
	key := r.key(gw)
	var s corev1.Secret
	err = r.own.Get(ctx, key, &s)
	switch {
	case apierrors.IsNotFound(err):
		s = corev1.Secret{
			ObjectMeta: r.ownedMeta(gw, false),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{ConfigKey: data},
		}
		if err := r.client.Create(ctx, &s); err != nil {
			return fmt.Errorf("creating data plane Secret %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading data plane Secret %s: %w", key, err)
	}
	if !owned(&s, gw) {
		return fmt.Errorf("secret %s is not Outrigger's for this Gateway (UID %s); not touching it", key, gw.UID)
	}
	if bytes.Equal(s.Data[ConfigKey], data) {
		return nil
	}
	s.Data = map[string][]byte{ConfigKey: data}
	if err := r.client.Update(ctx, &s); err != nil {
		return fmt.Errorf("updating data plane Secret %s: %w", key, err)
	}
	return nil
}

// key is where the Gateway's data plane objects are.
func (r *reconciler) key(gw *gwv1.Gateway) types.NamespacedName {
	return types.NamespacedName{Namespace: r.opts.Namespace, Name: DataPlaneName(gw.Namespace, gw.Name)}
}

// ownedMeta is the metadata of an object made for gw: in the data plane
// namespace, labeled with the Gateway's name, namespace and UID (owner
// references cannot cross namespaces). withInfrastructure adds the
// labels and annotations of spec.infrastructure, which the specification
// asks to carry to what is made for the Gateway (and through which a
// user gives a provider its load balancer annotations).
func (r *reconciler) ownedMeta(gw *gwv1.Gateway, withInfrastructure bool) metav1.ObjectMeta {
	labels := map[string]string{}
	annotations := map[string]string{}
	if inf := gw.Spec.Infrastructure; inf != nil && withInfrastructure {
		for k, v := range inf.Labels {
			labels[string(k)] = string(v)
		}
		for k, v := range inf.Annotations {
			annotations[string(k)] = string(v)
		}
	}
	maps.Copy(labels, r.selector(gw))
	labels[GatewayLabel], labels[GatewayNamespaceLabel] = gw.Name, gw.Namespace
	return metav1.ObjectMeta{Name: DataPlaneName(gw.Namespace, gw.Name), Namespace: r.opts.Namespace, Labels: labels, Annotations: annotations}
}

// selector picks the Gateway's data plane pods.
func (r *reconciler) selector(gw *gwv1.Gateway) map[string]string {
	return map[string]string{managedByLabel: managedBy, GatewayUIDLabel: string(gw.UID)}
}

// owned says whether an object was made by Outrigger for this very
// Gateway: its UID, not its name.
func owned(o metav1.Object, gw *gwv1.Gateway) bool {
	return o.GetLabels()[GatewayUIDLabel] == string(gw.UID) && o.GetLabels()[managedByLabel] == managedBy
}

// ensureService keeps the load balancer Service fronting the data plane:
// its ports are the listeners', its class the provider's, its annotations
// those of spec.infrastructure (how a user passes provider options).
func (r *reconciler) ensureService(ctx context.Context, gw *gwv1.Gateway, ports []corev1.ServicePort) (*corev1.Service, error) {
	key := r.key(gw)
	var cur corev1.Service
	err := r.client.Get(ctx, key, &cur)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Service %s: %w", key, err)
	}
	exists := err == nil
	if exists && !owned(&cur, gw) {
		return nil, fmt.Errorf("service %s exists and is not Outrigger's for this Gateway; not touching it", key)
	}
	if len(ports) == 0 {
		// No valid listener: nothing to balance.
		if exists {
			if err := r.client.Delete(ctx, &cur); err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("deleting Service %s: %w", key, err)
			}
		}
		return nil, nil
	}
	want := corev1.Service{
		ObjectMeta: r.ownedMeta(gw, true),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Ports:    ports,
			Selector: r.selector(gw),
		},
	}
	if r.opts.LoadBalancerClass != "" {
		want.Spec.LoadBalancerClass = ptrTo(r.opts.LoadBalancerClass)
	}
	if len(gw.Spec.Addresses) == 1 && net.ParseIP(gw.Spec.Addresses[0].Value) != nil {
		want.Spec.LoadBalancerIP = gw.Spec.Addresses[0].Value //nolint:staticcheck // how providers take a requested address
	}
	if !exists {
		if err := r.client.Create(ctx, &want); err != nil {
			return nil, fmt.Errorf("creating Service %s: %w", key, err)
		}
		return &want, nil
	}
	upd := cur.DeepCopy()
	// Node ports the API server allocated stay.
	for i := range want.Spec.Ports {
		for _, p := range cur.Spec.Ports {
			if p.Port == want.Spec.Ports[i].Port && p.Protocol == want.Spec.Ports[i].Protocol {
				want.Spec.Ports[i].NodePort = p.NodePort
			}
		}
	}
	upd.Spec.Ports = want.Spec.Ports
	upd.Spec.Selector = want.Spec.Selector
	upd.Spec.LoadBalancerIP = want.Spec.LoadBalancerIP //nolint:staticcheck // as above
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	maps.Copy(upd.Labels, want.Labels)
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	maps.Copy(upd.Annotations, want.Annotations)
	if equality.Semantic.DeepEqual(upd.Spec, cur.Spec) && equality.Semantic.DeepEqual(upd.ObjectMeta, cur.ObjectMeta) {
		return &cur, nil
	}
	if err := r.client.Update(ctx, upd); err != nil {
		return nil, fmt.Errorf("updating Service %s: %w", key, err)
	}
	return upd, nil
}

// front is what serves a Gateway's addresses, as the status tells it: a
// load balancer Service with Outrigger's data plane behind it, or the
// cloud's own layer-7 load balancer.
type front struct {
	// exists: something is made to serve the Gateway (it has a valid
	// listener).
	exists  bool
	ingress []corev1.LoadBalancerIngress
	// waiting says why there is no address yet; a provider's refusal
	// starts with refusedPrefix.
	waiting string
	// pending says why the addresses do not serve yet ("" they do).
	pending string
}

// refusedPrefix starts the Programmed message of a Gateway whose load
// balancer the provider refused; such a message is also a Warning Event.
const refusedPrefix = "the provider did not make the load balancer"

// serviceFront is the state of a Gateway served by Outrigger's data plane
// behind svc (nil: none).
func serviceFront(svc *corev1.Service, dataPlaneReady bool) front {
	if svc == nil {
		return front{}
	}
	f := front{exists: true, ingress: svc.Status.LoadBalancer.Ingress}
	f.waiting = fmt.Sprintf("waiting for the load balancer of Service %s/%s", svc.Namespace, svc.Name)
	// The provider's refusal (a quota, a protocol it lacks) is on the
	// Service; the Gateway says it too.
	if lb := meta.FindStatusCondition(svc.Status.Conditions, service.ConditionLoadBalancerReady); lb != nil &&
		lb.Status == metav1.ConditionFalse && lb.Reason != service.ConditionReasonProvisioning {
		f.waiting = fmt.Sprintf("%s of Service %s/%s: %s: %s", refusedPrefix, svc.Namespace, svc.Name, lb.Reason, lb.Message)
	}
	if !dataPlaneReady {
		f.pending = fmt.Sprintf("waiting for the data plane Deployment %s/%s to be available", svc.Namespace, svc.Name)
	}
	return f
}

// writeGatewayStatus writes addresses, conditions and listeners; it says
// whether the Gateway is programmed.
func (r *reconciler) writeGatewayStatus(ctx context.Context, gw *gwv1.Gateway, res *result, f front) (bool, error) {
	orig := gw.DeepCopy()
	var addrs []gwv1.GatewayStatusAddress
	for _, in := range f.ingress {
		switch {
		case in.IP != "":
			addrs = append(addrs, gwv1.GatewayStatusAddress{Type: ptrTo(gwv1.IPAddressType), Value: in.IP})
		case in.Hostname != "":
			addrs = append(addrs, gwv1.GatewayStatusAddress{Type: ptrTo(gwv1.HostnameAddressType), Value: in.Hostname})
		}
	}
	gen := gw.Generation
	programmed := cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed), "", gen)
	switch {
	case res.accepted.Status == metav1.ConditionFalse:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "not accepted: "+res.accepted.Message, gen)
	case !f.exists:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no valid listener", gen)
	case len(addrs) == 0:
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotAssigned), f.waiting, gen)
	case f.pending != "":
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonPending), f.pending, gen)
	case len(gw.Spec.Addresses) == 1 && !slices.ContainsFunc(addrs, func(a gwv1.GatewayStatusAddress) bool { return a.Value == gw.Spec.Addresses[0].Value }):
		programmed = cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonAddressNotUsable),
			fmt.Sprintf("the provider gave %s, not the requested %s", addrs[0].Value, gw.Spec.Addresses[0].Value), gen)
	}
	gw.Status.Addresses = addrs
	setCondition(&gw.Status.Conditions, res.accepted)
	setCondition(&gw.Status.Conditions, programmed)
	listeners := make([]gwv1.ListenerStatus, 0, len(res.listeners))
	for _, ls := range res.listeners {
		var prev []metav1.Condition
		for _, old := range orig.Status.Listeners {
			if old.Name == ls.Name {
				prev = old.Conditions
			}
		}
		conds := slices.Clone(prev)
		for _, c := range ls.Conditions {
			if c.Type == string(gwv1.ListenerConditionProgrammed) && c.Status == metav1.ConditionTrue && programmed.Status != metav1.ConditionTrue {
				c = cond(c.Type, false, string(gwv1.ListenerReasonPending), "waiting for the load balancer", gen)
			}
			setCondition(&conds, c)
		}
		conds = slices.DeleteFunc(conds, func(c metav1.Condition) bool {
			return !slices.ContainsFunc(ls.Conditions, func(n metav1.Condition) bool { return n.Type == c.Type })
		})
		ls.Conditions = conds
		listeners = append(listeners, ls)
	}
	gw.Status.Listeners = listeners
	if equality.Semantic.DeepEqual(orig.Status, gw.Status) {
		return programmed.Status == metav1.ConditionTrue, nil
	}
	if err := r.client.Status().Patch(ctx, gw, client.MergeFrom(orig)); err != nil {
		return false, fmt.Errorf("writing Gateway status: %w", err)
	}
	wasProgrammed := meta.IsStatusConditionTrue(orig.Status.Conditions, string(gwv1.GatewayConditionProgrammed))
	if programmed.Status == metav1.ConditionTrue && !wasProgrammed {
		r.recorder.Eventf(gw, corev1.EventTypeNormal, "Programmed", "Gateway programmed at %s", addrs[0].Value)
	}
	if prev := meta.FindStatusCondition(orig.Status.Conditions, programmed.Type); programmed.Status == metav1.ConditionFalse &&
		strings.HasPrefix(programmed.Message, refusedPrefix) && (prev == nil || prev.Message != programmed.Message) {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, "SyncLoadBalancerFailed", "%s", programmed.Message)
	}
	if res.accepted.Status == metav1.ConditionFalse && meta.FindStatusCondition(orig.Status.Conditions, res.accepted.Type) == nil {
		r.recorder.Eventf(gw, corev1.EventTypeWarning, res.accepted.Reason, "Gateway not accepted: %s", res.accepted.Message)
	}
	return programmed.Status == metav1.ConditionTrue, nil
}

// setCondition sets a condition, keeping its transition time when its
// status did not change.
func setCondition(conds *[]metav1.Condition, c metav1.Condition) {
	meta.SetStatusCondition(conds, c)
}

// writeRouteStatuses writes this Gateway's parent entries on every route
// that names it (or did), leaving other controllers' entries alone.
func (r *reconciler) writeRouteStatuses(ctx context.Context, gw *gwv1.Gateway, w *world, res *result) error {
	var errs []error
	update := func(o client.Object, parents *[]gwv1.RouteParentStatus, kind string) {
		key := routeKey{kind: kind, name: client.ObjectKeyFromObject(o)}
		want := res.routeParents[key]
		before := slices.Clone(*parents)
		var next []gwv1.RouteParentStatus
		for _, p := range *parents {
			if p.ControllerName == r.opts.ControllerName && refersTo(p.ParentRef, o.GetNamespace(), gw) {
				continue // replaced below
			}
			next = append(next, p)
		}
		for _, np := range want {
			// Keep transition times of unchanged conditions.
			var conds []metav1.Condition
			for _, old := range before {
				if old.ControllerName == np.ControllerName && equality.Semantic.DeepEqual(old.ParentRef, np.ParentRef) {
					conds = slices.Clone(old.Conditions)
				}
			}
			for _, c := range np.Conditions {
				setCondition(&conds, c)
			}
			np.Conditions = conds
			next = append(next, np)
		}
		if equality.Semantic.DeepEqual(before, next) {
			return
		}
		if next == nil {
			next = []gwv1.RouteParentStatus{}
		}
		*parents = next
		if err := r.client.Status().Update(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("writing status of %s %s: %w", kind, key.name, err))
			return
		}
		for _, np := range want {
			for _, c := range np.Conditions {
				if c.Status == metav1.ConditionFalse {
					r.recorder.Eventf(o, corev1.EventTypeWarning, c.Reason, "%s %s: %s", gw.Name, c.Type, c.Message)
				}
			}
		}
	}
	for _, hr := range w.httpRoutes {
		hr = hr.DeepCopy()
		update(hr, &hr.Status.Parents, kindHTTPRoute)
	}
	for _, gr := range w.grpcRoutes {
		gr = gr.DeepCopy()
		update(gr, &gr.Status.Parents, kindGRPCRoute)
	}
	for _, tr := range w.tcpRoutes {
		tr = tr.DeepCopy()
		update(tr, &tr.Status.Parents, kindTCPRoute)
	}
	for _, ur := range w.udpRoutes {
		ur = ur.DeepCopy()
		update(ur, &ur.Status.Parents, kindUDPRoute)
	}
	return errors.Join(errs...)
}

// cleanup deletes what Outrigger made for a Gateway (its data plane, or
// the cloud's own load balancer), then lets the Gateway go.
func (r *reconciler) cleanup(ctx context.Context, gw *gwv1.Gateway) (reconcile.Result, error) {
	if gone, err := r.deleteDataPlane(ctx, gw); err != nil || !gone {
		// The Service's deletion brings this Gateway back.
		return reconcile.Result{}, err
	}
	if r.opts.Cloud != nil {
		if err := r.deleteCloud(ctx, gw); err != nil {
			return reconcile.Result{}, err
		}
	}
	// Routes lose this Gateway's entries.
	w, err := r.gather(ctx, gw)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.writeRouteStatuses(ctx, gw, w, &result{routeParents: map[routeKey][]gwv1.RouteParentStatus{}}); err != nil {
		return reconcile.Result{}, err
	}
	patch := client.MergeFrom(gw.DeepCopy())
	controllerutil.RemoveFinalizer(gw, Finalizer)
	if err := r.client.Patch(ctx, gw, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	return reconcile.Result{}, nil
}

// deleteDataPlane deletes what Outrigger made for a Gateway's data plane:
// the load balancer's Service first, which its own finalizer holds until
// the cloud's load balancer is gone, then the Deployment and the Secret.
// It says whether they are all gone.
func (r *reconciler) deleteDataPlane(ctx context.Context, gw *gwv1.Gateway) (bool, error) {
	key := r.key(gw)
	var svc corev1.Service
	switch err := r.client.Get(ctx, key, &svc); {
	case err == nil && owned(&svc, gw):
		if svc.DeletionTimestamp.IsZero() {
			if err := r.client.Delete(ctx, &svc); err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting Service %s: %w", key, err)
			}
		}
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Secret{}} {
		if err := r.own.Get(ctx, key, o); err != nil || !owned(o, gw) {
			continue
		}
		if err := r.client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting %T %s: %w", o, key, err)
		}
	}
	return true, nil
}

// ensureDataPlane keeps the Gateway's data plane Deployment (when an image
// is configured) and says whether it is available.
func (r *reconciler) ensureDataPlane(ctx context.Context, gw *gwv1.Gateway, ports []corev1.ServicePort) (bool, error) {
	if r.opts.DataPlaneImage == "" {
		return true, nil
	}
	key := r.key(gw)
	want := r.deployment(gw, ports)
	var cur appsv1.Deployment
	switch err := r.own.Get(ctx, key, &cur); {
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, want); err != nil {
			return false, fmt.Errorf("creating data plane Deployment %s: %w", key, err)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading data plane Deployment %s: %w", key, err)
	}
	if !owned(&cur, gw) {
		return false, fmt.Errorf("deployment %s is not Outrigger's for this Gateway (UID %s); not touching it", key, gw.UID)
	}
	// What the API server defaults in the template makes it differ from
	// what was asked; the hash of what was asked tells a change.
	if cur.Annotations[templateHashAnnotation] != want.Annotations[templateHashAnnotation] || !maps.Equal(want.Labels, cur.Labels) {
		upd := cur.DeepCopy()
		upd.Labels = want.Labels
		if upd.Annotations == nil {
			upd.Annotations = map[string]string{}
		}
		upd.Annotations[templateHashAnnotation] = want.Annotations[templateHashAnnotation]
		upd.Spec.Template = want.Spec.Template
		if err := r.client.Update(ctx, upd); err != nil {
			return false, fmt.Errorf("updating data plane Deployment %s: %w", key, err)
		}
		return false, nil
	}
	return cur.Status.ObservedGeneration >= cur.Generation && cur.Status.AvailableReplicas > 0, nil
}

// deployment is the data plane's Deployment: Outrigger's own image running
// `outrigger gateway-dataplane`, under Pod Security "restricted" (listeners
// below 1024 through the namespaced sysctl that allows them, not a
// capability).
func (r *reconciler) deployment(gw *gwv1.Gateway, ports []corev1.ServicePort) *appsv1.Deployment {
	meta := r.ownedMeta(gw, true)
	podLabels := maps.Clone(meta.Labels)
	var cports []corev1.ContainerPort
	for _, p := range ports {
		cports = append(cports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
	}
	d := &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: r.selector(gw)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: meta.Annotations},
				Spec: corev1.PodSpec{
					ServiceAccountName: r.opts.DataPlaneServiceAccount,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptrTo(true),
						RunAsUser:      ptrTo(int64(65532)),
						RunAsGroup:     ptrTo(int64(65532)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
					},
					Containers: []corev1.Container{{
						Name:  "dataplane",
						Image: r.opts.DataPlaneImage,
						Args:  []string{"gateway-dataplane", "--namespace=" + r.opts.Namespace, "--secret=" + meta.Name},
						Ports: cports,
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(dataplane.HealthPort)}},
							PeriodSeconds: 2,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(dataplane.HealthPort)}},
							PeriodSeconds: 10,
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptrTo(false),
							ReadOnlyRootFilesystem:   ptrTo(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
					}},
				},
			},
		},
	}
	template, _ := json.Marshal(d.Spec.Template)
	sum := sha256.Sum256(template)
	d.Annotations = maps.Clone(d.Annotations)
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[templateHashAnnotation] = hex.EncodeToString(sum[:8])
	return d
}
