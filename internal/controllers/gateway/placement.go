package gateway

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// NamespaceMode is where a Gateway's data plane objects (its programming
// Secret, Deployment, PodDisruptionBudget, ServiceAccount, Role,
// RoleBinding and load balancer Service) are made. It is a pflag.Value,
// so a mistyped --gateway-namespace-mode fails when flags are parsed.
type NamespaceMode string

const (
	// NamespaceShared makes every Gateway's data plane in one namespace,
	// Options.Namespace: Outrigger writes nowhere else, and needs rights
	// there only.
	NamespaceShared NamespaceMode = "shared"
	// NamespaceGateway makes each Gateway's data plane in the Gateway's own
	// namespace, as the Gateway API's other implementations do and as its
	// GatewayInfrastructure conformance test expects; Outrigger then needs
	// the right to write those kinds in every namespace.
	NamespaceGateway NamespaceMode = "gateway"
)

// String is the mode's flag value; "" is the default, shared.
func (m *NamespaceMode) String() string {
	if m == nil || *m == "" {
		return string(NamespaceShared)
	}
	return string(*m)
}

// Set parses a flag value.
func (m *NamespaceMode) Set(s string) error {
	mode, err := ParseNamespaceMode(s)
	if err != nil {
		return err
	}
	*m = mode
	return nil
}

// Type names the value in --help.
func (m *NamespaceMode) Type() string { return "mode" }

// ParseNamespaceMode reads "shared" or "gateway".
func ParseNamespaceMode(s string) (NamespaceMode, error) {
	switch NamespaceMode(s) {
	case NamespaceShared, NamespaceGateway:
		return NamespaceMode(s), nil
	}
	return "", fmt.Errorf("%q is not a namespace mode: want %s or %s", s, NamespaceShared, NamespaceGateway)
}

// dataPlaneNamespace is the namespace of the objects made for gw.
func (o Options) dataPlaneNamespace(gw *gwv1.Gateway) string {
	if o.NamespaceMode == NamespaceGateway {
		return gw.Namespace
	}
	return o.Namespace
}

// ownCacheOptions are what the cache of Outrigger's own objects holds:
// the shared namespace's objects labelled managed-by Outrigger, or, in
// gateway mode, those of every namespace that also name a Gateway's UID
// (so that nothing else Outrigger labels is cached cluster-wide).
func (o Options) ownCacheOptions() (cache.Options, error) {
	managed, err := labels.NewRequirement(managedByLabel, selection.Equals, []string{managedBy})
	if err != nil {
		return cache.Options{}, err
	}
	if o.NamespaceMode != NamespaceGateway {
		return cache.Options{
			DefaultNamespaces:    map[string]cache.Config{o.Namespace: {}},
			DefaultLabelSelector: labels.NewSelector().Add(*managed),
		}, nil
	}
	forGateway, err := labels.NewRequirement(GatewayUIDLabel, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, err
	}
	return cache.Options{DefaultLabelSelector: labels.NewSelector().Add(*managed, *forGateway)}, nil
}

// placedRight says whether an object Outrigger labelled for a Gateway is
// where this mode makes them: one elsewhere (left by another mode, or
// another configuration) is not this controller's to map.
func (o Options) placedRight(obj client.Object) bool {
	if o.NamespaceMode == NamespaceGateway {
		return obj.GetNamespace() == obj.GetLabels()[GatewayNamespaceLabel]
	}
	return obj.GetNamespace() == o.Namespace
}
