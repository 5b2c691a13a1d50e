package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// SupportedFeatures are the features a class of Outrigger's states in its
// status: the core of the HTTP, GRPC, TCP, UDP and TLS profiles, and the extended
// features the conformance suite passes (docs/gateway.md).
var SupportedFeatures = []features.FeatureName{
	features.SupportGateway,
	features.SupportHTTPRoute,
	features.SupportReferenceGrant,
	features.SupportGRPCRoute,
	features.SupportTCPRoute,
	features.SupportUDPRoute,
	features.SupportGatewayPort8080,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteSchemeRedirect,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteBackendProtocolWebSocket,
	features.SupportGRPCRouteNamedRouteRule,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteCORS,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	features.SupportGatewayStaticAddresses,
	features.SupportGatewayAddressEmpty,
	features.SupportGatewayFrontendClientCertificateValidation,
	features.SupportGatewayFrontendClientCertificateValidationInsecureFallback,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportBackendTLSPolicy,
	features.SupportBackendTLSPolicySANValidation,
	features.SupportGatewayBackendClientCertificate,
	features.SupportTLSRoute,
	features.SupportTLSRouteModeTerminate,
	features.SupportTLSRouteModeMixed,
	features.SupportListenerSet,
	// Experimental channel, served with the standard CRDs: the port of a
	// parentRef (standard) is what it matches.
	features.SupportHTTPRouteDestinationPortMatching,
}

// RetryFeatures are the experimental channel's retry features: stated
// where the HTTPRoute CRD keeps rules[].retry (Options.HTTPRouteRetry).
var RetryFeatures = []features.FeatureName{
	features.SupportHTTPRouteRetry,
	features.SupportHTTPRouteRetryBackendTimeout,
	features.SupportHTTPRouteRetryConnectionError,
}

// staticAddressProviders are the providers whose load balancers take the
// address a Service asks for (spec.loadBalancerIP) or refuse it, so that a
// Gateway's spec.addresses is honoured or reported AddressNotUsable. Others
// may ignore the field (AWS's does): their classes do not state
// GatewayStaticAddresses, though a Gateway's request still reaches the
// Service and Programmed says whether it was honoured.
var staticAddressProviders = []string{"local", "sim"}

// classReconciler accepts the GatewayClasses naming Outrigger's controller.
type classReconciler struct {
	client     client.Client
	controller gwv1.GatewayController
	// features are those stated: SupportedFeatures, less those a
	// provider's own load balancers do not serve.
	features []features.FeatureName
	// params reads the parameters ConfigMaps; nil: Outrigger may not
	// watch them, and a parametersRef is refused.
	params client.Reader
}

// classFeatures are the features a class states: what Outrigger compiles
// (GRPCRoute's, TLSRoute's and BackendTLSPolicy's, with
// GatewayBackendClientCertificate, only where it serves those kinds) and
// what serves it (its data plane, or the provider's load balancers)
// serves.
func classFeatures(opts Options, s serving) []features.FeatureName {
	var fs []features.FeatureName
	all := SupportedFeatures
	if opts.HTTPRouteRetry {
		all = append(slices.Clip(all), RetryFeatures...)
	}
	for _, f := range all {
		if !opts.GRPCRoute && strings.HasPrefix(string(f), "GRPCRoute") || !opts.TLSRoute && strings.HasPrefix(string(f), "TLSRoute") ||
			!opts.BackendTLSPolicy && (strings.HasPrefix(string(f), "BackendTLSPolicy") || f == features.SupportGatewayBackendClientCertificate) {
			// The backend client certificate is presented to backends
			// reached over TLS, which only a BackendTLSPolicy asks for.
			continue
		}
		if f == features.SupportListenerSet && !opts.ListenerSet {
			continue
		}
		if f == features.SupportGatewayStaticAddresses && !slices.Contains(staticAddressProviders, opts.ProviderName) {
			continue
		}
		fs = append(fs, f)
	}
	return s.supported(fs)
}

func (r *classReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var gc gwv1.GatewayClass
	if err := r.client.Get(ctx, req.NamespacedName, &gc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if gc.Spec.ControllerName != r.controller {
		return reconcile.Result{}, nil
	}
	orig := gc.DeepCopy()
	accepted := metav1.Condition{
		Type: string(gwv1.GatewayClassConditionStatusAccepted), Status: metav1.ConditionTrue,
		Reason: string(gwv1.GatewayClassReasonAccepted), ObservedGeneration: gc.Generation,
	}
	msg, err := r.invalidParameters(ctx, &gc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if msg != "" {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(gwv1.GatewayClassReasonInvalidParameters), msg
	}
	meta.SetStatusCondition(&gc.Status.Conditions, accepted)
	meta.SetStatusCondition(&gc.Status.Conditions, metav1.Condition{
		Type: string(gwv1.GatewayClassConditionStatusSupportedVersion), Status: metav1.ConditionTrue,
		Reason: string(gwv1.GatewayClassReasonSupportedVersion), ObservedGeneration: gc.Generation,
	})
	gc.Status.SupportedFeatures = gc.Status.SupportedFeatures[:0]
	for _, f := range r.features {
		gc.Status.SupportedFeatures = append(gc.Status.SupportedFeatures, gwv1.SupportedFeature{Name: gwv1.FeatureName(f)})
	}
	if err := r.client.Status().Patch(ctx, &gc, client.MergeFrom(orig)); err != nil {
		return reconcile.Result{}, fmt.Errorf("accepting GatewayClass %s: %w", gc.Name, err)
	}
	return reconcile.Result{}, nil
}

// invalidParameters says why the class's parametersRef cannot be read,
// or "" (none, or a valid one).
func (r *classReconciler) invalidParameters(ctx context.Context, gc *gwv1.GatewayClass) (string, error) {
	ref := gc.Spec.ParametersRef
	switch {
	case ref == nil:
		return "", nil
	case r.params == nil:
		return "parametersRef is not read: Outrigger may not watch ConfigMaps (deploy/rbac-gateway.yaml grants it)", nil
	}
	var keys []types.NamespacedName
	if ref.Namespace != nil {
		keys = append(keys, types.NamespacedName{Namespace: string(*ref.Namespace), Name: ref.Name})
	}
	cms, err := readConfigMaps(ctx, r.params, keys...)
	if err != nil {
		return "", err
	}
	if _, err := classParameters(ref, cms); err != nil {
		return "parametersRef: " + err.Error(), nil
	}
	return "", nil
}

// setupClass adds the GatewayClass controller; params is the parameters
// ConfigMaps' cache (nil: not watched).
func setupClass(mgr ctrl.Manager, opts Options, s serving, params cache.Cache) error {
	r := &classReconciler{client: mgr.GetClient(), controller: opts.ControllerName, features: classFeatures(opts, s)}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		gc, ok := o.(*gwv1.GatewayClass)
		return ok && gc.Spec.ControllerName == opts.ControllerName
	})
	b := ctrl.NewControllerManagedBy(mgr)
	if params != nil {
		r.params = params
		b = b.WatchesRawSource(configMapSource(params, classesOfParameters(mgr.GetClient(), opts.ControllerName)))
	}
	if err := b.
		Named(opts.name("gatewayclass")).
		For(&gwv1.GatewayClass{}, builder.WithPredicates(ours, predicate.GenerationChangedPredicate{})).
		Complete(r); err != nil {
		return err
	}
	if opts.ClassName == "" {
		return nil
	}
	// The class is made once, by the leader; one a user changed or
	// deleted and made again is theirs.
	return mgr.Add(leaderRunnable(func(ctx context.Context) error {
		gc := &gwv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: opts.ClassName, Labels: map[string]string{managedByLabel: managedBy}},
			Spec: gwv1.GatewayClassSpec{
				ControllerName: opts.ControllerName,
				Description:    ptrTo(fmt.Sprintf("Cloud load balancers of provider %s through Outrigger", opts.Provider)),
			},
		}
		if err := mgr.GetClient().Create(ctx, gc); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating GatewayClass %s: %w", opts.ClassName, err)
		}
		return nil
	}))
}

func ptrTo[T any](v T) *T { return &v }

// leaderRunnable runs once on the leader.
type leaderRunnable func(context.Context) error

func (f leaderRunnable) Start(ctx context.Context) error {
	if err := f(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Gateway API setup step failed")
	}
	return nil
}

func (leaderRunnable) NeedLeaderElection() bool { return true }
