package gateway

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// A GatewayClass's spec.parametersRef and a Gateway's
// spec.infrastructure.parametersRef name a ConfigMap of settings
// (docs/gateway.md, "Settings"): the Gateway API's own extension points,
// so no CRD of Outrigger's is needed. Its data is read strictly (an
// unknown key or a value out of bounds refuses the class or Gateway,
// InvalidParameters, naming the key), and a Gateway's keys override its
// class's one by one. Only ConfigMaps labelled ParametersLabel are read:
// Outrigger caches those and no other ConfigMap of the cluster.

// ParametersLabel marks a ConfigMap a parametersRef may name (any value).
const ParametersLabel = "gateway.outrigger.dev/parameters"

// defaultReplicas is the data plane's pods when no parametersRef gives
// them: two, so that a drain, a crash or a rollout leaves one serving.
const defaultReplicas = 2

// parameters are a Gateway's settings, its class's and its own merged.
type parameters struct {
	// replicas are the data plane pods when given (nil: defaultReplicas,
	// and more made by hand or by an autoscaler stay).
	replicas *int32
	// externalTrafficPolicy of the load balancer's Service.
	externalTrafficPolicy corev1.ServiceExternalTrafficPolicy
	// settings go to the data plane in its programming; nil when no key
	// of theirs is given, so a Gateway without parameters compiles as it
	// always did.
	settings *dataplane.Settings
}

func defaultParameters() parameters {
	return parameters{externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster}
}

// parameterKey is one key a parameters ConfigMap may hold: how its value
// is read, and where it goes.
type parameterKey struct {
	name string
	// parse reads a value strictly; the error says why it is refused.
	parse func(string) (any, error)
	set   func(p *parameters, v any)
}

// parameterKeys are every key, in the order docs/gateway.md lists them.
var parameterKeys = []parameterKey{
	{name: "replicas", parse: intBetween(1, 20), set: func(p *parameters, v any) { p.replicas = ptrTo(int32(v.(int))) }},
	{name: "externalTrafficPolicy", parse: oneOf(string(corev1.ServiceExternalTrafficPolicyCluster), string(corev1.ServiceExternalTrafficPolicyLocal)),
		set: func(p *parameters, v any) { p.externalTrafficPolicy = corev1.ServiceExternalTrafficPolicy(v.(string)) }},
	{name: "proxyProtocol", parse: boolean, set: func(p *parameters, v any) { p.dataplane().ProxyProtocol = v.(bool) }},
	{name: "trustedHops", parse: intBetween(0, dataplane.MaxTrustedHops), set: func(p *parameters, v any) { p.dataplane().TrustedHops = v.(int) }},
	{name: "requestHeaderTimeout", parse: durationBetween(time.Second, 24*time.Hour), set: func(p *parameters, v any) { p.dataplane().RequestHeaderTimeout = v.(time.Duration) }},
	{name: "idleTimeout", parse: durationBetween(time.Second, 24*time.Hour), set: func(p *parameters, v any) { p.dataplane().IdleTimeout = v.(time.Duration) }},
	{name: "streamIdleTimeout", parse: durationBetween(time.Second, 24*time.Hour), set: func(p *parameters, v any) { p.dataplane().StreamIdleTimeout = v.(time.Duration) }},
	{name: "tcpIdleTimeout", parse: durationBetween(time.Second, 24*time.Hour), set: func(p *parameters, v any) { p.dataplane().TCPIdleTimeout = v.(time.Duration) }},
	{name: "accessLog", parse: accessLogShare, set: func(p *parameters, v any) {
		// Off is the data plane's default: it adds no settings, so that
		// a Gateway's programming is as it was without the key (a
		// Gateway's Off over its class's All replaces the class's value
		// before this is called).
		if share := v.(float64); share > 0 {
			p.dataplane().AccessLog = share
		}
	}},
}

// proxyProtocol says whether the data plane expects, and the load
// balancer is asked to send, PROXY protocol headers.
func (p parameters) proxyProtocol() bool {
	return p.settings != nil && p.settings.ProxyProtocol
}

func (p *parameters) dataplane() *dataplane.Settings {
	if p.settings == nil {
		p.settings = &dataplane.Settings{}
	}
	return p.settings
}

func intBetween(lo, hi int) func(string) (any, error) {
	return func(s string) (any, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q is not a whole number from %d to %d", s, lo, hi)
		}
		return n, nil
	}
}

func durationBetween(lo, hi time.Duration) func(string) (any, error) {
	return func(s string) (any, error) {
		d, err := time.ParseDuration(s)
		if err != nil || d < lo || d > hi {
			return nil, fmt.Errorf("%q is not a duration from %v to %v (Go syntax: 30s, 5m, 1h)", s, lo, hi)
		}
		return d, nil
	}
}

// boolean is "true" or "false", exactly: not strconv.ParseBool's "1",
// "T" or "TRUE", so that what a ConfigMap says reads one way.
func boolean(s string) (any, error) {
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return nil, fmt.Errorf("%q is not true or false", s)
}

// accessLogShare reads the accessLog key: Off, All, or the share of
// requests sampled written as a decimal fraction above 0 and at most 1
// ("0.01"); not strconv.ParseFloat's exponents, hexadecimal or Inf.
func accessLogShare(s string) (any, error) {
	switch s {
	case "Off":
		return 0.0, nil
	case "All":
		return 1.0, nil
	}
	bad := fmt.Errorf("%q is not Off, All or a fraction above 0 and at most 1 (0.01 logs one request in a hundred)", s)
	if s == "" || strings.Trim(s, "0123456789.") != "" || strings.Count(s, ".") > 1 {
		return nil, bad
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 1 {
		return nil, bad
	}
	return f, nil
}

func oneOf(values ...string) func(string) (any, error) {
	return func(s string) (any, error) {
		if !slices.Contains(values, s) {
			return nil, fmt.Errorf("%q is not one of %s", s, strings.Join(values, ", "))
		}
		return s, nil
	}
}

// parseParameters reads a parameters ConfigMap's data: every key known,
// every value valid, or an error naming the first key (in name order) that
// is not.
func parseParameters(cm *corev1.ConfigMap) (map[string]any, error) {
	if len(cm.BinaryData) > 0 {
		return nil, fmt.Errorf("binaryData is not read; give every key in data")
	}
	out := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		i := slices.IndexFunc(parameterKeys, func(pk parameterKey) bool { return pk.name == k })
		if i < 0 {
			return nil, fmt.Errorf("key %q is not a setting (known: %s)", k, knownKeys())
		}
		v, err := parameterKeys[i].parse(cm.Data[k])
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}

func knownKeys() string {
	names := make([]string, 0, len(parameterKeys))
	for _, pk := range parameterKeys {
		names = append(names, pk.name)
	}
	return strings.Join(names, ", ")
}

// mergeParameters is the defaults, then the class's values, then the
// Gateway's over them key by key.
func mergeParameters(class, gateway map[string]any) parameters {
	p := defaultParameters()
	merged := maps.Clone(class)
	if merged == nil {
		merged = map[string]any{}
	}
	maps.Copy(merged, gateway)
	for _, pk := range parameterKeys {
		if v, ok := merged[pk.name]; ok {
			pk.set(&p, v)
		}
	}
	return p
}

// parametersOf reads the ConfigMap a reference names: group, kind and
// name as a parametersRef gives them, in namespace ns. configMaps are
// those gathered (labelled ParametersLabel).
func parametersOf(group gwv1.Group, kind gwv1.Kind, name, ns string, configMaps map[types.NamespacedName]*corev1.ConfigMap) (map[string]any, error) {
	if group != "" || kind != "ConfigMap" {
		return nil, fmt.Errorf("%s %s is not read: name a ConfigMap (group \"\", kind ConfigMap)", groupKind(group, kind), name)
	}
	if ns == "" {
		return nil, fmt.Errorf("ConfigMap %s: a GatewayClass's parametersRef needs a namespace", name)
	}
	cm, ok := configMaps[types.NamespacedName{Namespace: ns, Name: name}]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s not found (only ConfigMaps labelled %s are read)", ns, name, ParametersLabel)
	}
	v, err := parseParameters(cm)
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", ns, name, err)
	}
	return v, nil
}

func groupKind(group gwv1.Group, kind gwv1.Kind) string {
	if group == "" {
		return string(kind)
	}
	return string(kind) + "." + string(group)
}

// classParameters reads a GatewayClass's parametersRef (none: no values).
func classParameters(ref *gwv1.ParametersReference, configMaps map[types.NamespacedName]*corev1.ConfigMap) (map[string]any, error) {
	if ref == nil {
		return nil, nil
	}
	ns := ""
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return parametersOf(ref.Group, ref.Kind, ref.Name, ns, configMaps)
}

// resolveParameters is a Gateway's parameters, or why they cannot be had:
// the class's parametersRef, then the Gateway's own. It is part of
// compile, and as pure.
func resolveParameters(w *world) (parameters, string) {
	gw := w.gateway
	var own *gwv1.LocalParametersReference
	if inf := gw.Spec.Infrastructure; inf != nil {
		own = inf.ParametersRef
	}
	if !w.parametersServed && (w.classParameters != nil || own != nil) {
		return parameters{}, "parametersRef is not read: Outrigger may not watch ConfigMaps (deploy/rbac-gateway.yaml grants it)"
	}
	class, err := classParameters(w.classParameters, w.configMaps)
	if err != nil {
		return parameters{}, "the GatewayClass's parametersRef: " + err.Error()
	}
	var mine map[string]any
	if own != nil {
		if mine, err = parametersOf(own.Group, own.Kind, own.Name, gw.Namespace, w.configMaps); err != nil {
			return parameters{}, "spec.infrastructure.parametersRef: " + err.Error()
		}
	}
	return mergeParameters(class, mine), ""
}
