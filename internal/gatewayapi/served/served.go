// Package served says which of the Gateway API's fields the API server
// serves. It is apart from package gatewayapi, which installs CRDs with
// controller-runtime's envtest: Outrigger's binary links this one, and
// envtest's testing packages must not be linked into a binary that runs
// in a container (they make directories under /tmp when loaded).
package served

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// RuleField says whether the API server keeps field in an
// HTTPRoute's spec.rules[] items: an experimental field (retry,
// sessionPersistence) is in the experimental channel's CRD only, and the
// standard CRD's schema prunes it. It reads the API server's OpenAPI v3
// document, which every authenticated identity may read: no RBAC of its
// own.
func RuleField(ctx context.Context, cfg *rest.Config, field string) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("reading the OpenAPI document: %w", err)
	}
	paths, err := dc.OpenAPIV3WithContext(ctx).PathsWithContext(ctx)
	if err != nil {
		return false, fmt.Errorf("reading the OpenAPI document: %w", err)
	}
	gv, ok := paths["apis/"+gwv1.GroupVersion.String()]
	if !ok {
		return false, fmt.Errorf("the OpenAPI document has no %s", gwv1.GroupVersion)
	}
	doc, err := gv.SchemaWithContext(ctx, runtime.ContentTypeJSON)
	if err != nil {
		return false, fmt.Errorf("reading the OpenAPI document of %s: %w", gwv1.GroupVersion, err)
	}
	has, err := schemaHasRuleField(doc, field)
	if err != nil {
		return false, fmt.Errorf("the OpenAPI document of %s: %w", gwv1.GroupVersion, err)
	}
	return has, nil
}

// schemaHasRuleField says whether an OpenAPI v3 document's HTTPRoute has
// field in its spec.rules[] items.
func schemaHasRuleField(doc []byte, field string) (bool, error) {
	type schema struct {
		Properties map[string]*schema `json:"properties"`
		Items      *schema            `json:"items"`
	}
	var d struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return false, err
	}
	// A CRD's schema is named by its reversed group and version:
	// io.k8s.networking.gateway.v1.HTTPRoute.
	s := d.Components.Schemas["io.k8s.networking.gateway."+gwv1.GroupVersion.Version+".HTTPRoute"]
	if s == nil {
		return false, errors.New("no HTTPRoute schema")
	}
	for _, step := range []string{"spec", "rules", "[]"} {
		switch {
		case s == nil:
			return false, nil
		case step == "[]":
			s = s.Items
		default:
			s = s.Properties[step]
		}
	}
	return s != nil && s.Properties[field] != nil, nil
}
