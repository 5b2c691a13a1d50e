package gateway

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gatewayapi/served"
)

// The gateway controller runs only where the Gateway API CRDs are served
// and its identity may watch them. Otherwise it is left out with a log line
// (as a controller whose provider lacks an interface), so a cluster without
// the Gateway API, or one switching from the upstream CCM with upstream's
// RBAC, runs as before.

// gatewayAPIServed says why the Gateway API is not there, or "".
func gatewayAPIServed(mgr manager.Manager) string {
	gk := schema.GroupKind{Group: gwv1.GroupName, Kind: "Gateway"}
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, gwv1.GroupVersion.Version); err != nil {
		return fmt.Sprintf("the Gateway API (%s) is not served: install its CRDs and restart", gwv1.GroupVersion)
	}
	return ""
}

// routeKindServed says why routes of an optional kind (GRPCRoute,
// TLSRoute) are not served, or "": their CRDs are optional (a cluster may
// have installed the Gateway API before they were standard, or left them
// out), and the other kinds are served without them.
func routeKindServed(ctx context.Context, mgr manager.Manager, kind, resource string) string {
	gk := schema.GroupKind{Group: gwv1.GroupName, Kind: kind}
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, gwv1.GroupVersion.Version); err != nil {
		return fmt.Sprintf("%s (%s) is not served", kind, gwv1.GroupVersion)
	}
	return watchAllowed(ctx, mgr, gwv1.GroupName, resource)
}

// configMapsAllowed says why the controller's identity may not watch
// ConfigMaps (which parametersRefs name), or "": an older
// deploy/rbac-gateway.yaml does not grant it, and parametersRefs are then
// refused rather than the controller stopped.
func configMapsAllowed(ctx context.Context, mgr manager.Manager) string {
	return watchAllowed(ctx, mgr, "", "configmaps")
}

// watchAllowed says why the controller's identity may not watch a
// resource of group, or "".
func watchAllowed(ctx context.Context, mgr manager.Manager, group, res string) string {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: group, Resource: res, Verb: "watch"},
	}}
	if err := mgr.GetClient().Create(ctx, review); err != nil {
		return fmt.Sprintf("cannot check access to %s: %v", res, err)
	}
	if !review.Status.Allowed {
		return fmt.Sprintf("not allowed to watch %s (deploy/rbac-gateway.yaml grants it)", schema.GroupResource{Group: group, Resource: res})
	}
	return ""
}

// gatewayAPIAllowed says why the controller's identity may not watch the
// Gateway API, or "".
func gatewayAPIAllowed(ctx context.Context, mgr manager.Manager) string {
	for _, res := range []string{"gatewayclasses", "gateways", "httproutes", "tcproutes", "udproutes", "referencegrants"} {
		if why := watchAllowed(ctx, mgr, gwv1.GroupName, res); why != "" {
			return why
		}
	}
	return ""
}

// httpRouteRetryServed says why HTTPRoute rules' retry stanza is not
// served, or "": it is a field of the experimental channel's HTTPRoute
// CRD only, and the standard CRD's schema prunes it, so a class states
// the retry features only where the API server keeps the field. Read at
// start: a CRD changed later takes a restart, as a kind installed later
// does.
func httpRouteRetryServed(ctx context.Context, cfg *rest.Config) string {
	has, err := served.RuleField(ctx, cfg, "retry")
	switch {
	case err != nil:
		return err.Error()
	case !has:
		return "the HTTPRoute CRD has no rules[].retry (the experimental channel's has)"
	}
	return ""
}
