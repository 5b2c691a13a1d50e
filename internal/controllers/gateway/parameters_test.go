package gateway

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

func makeConfigMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{ParametersLabel: "true"}}, Data: data}
}

// A parameters ConfigMap is read strictly: every key known, every value
// within its bounds, and a refusal names the key and why.
func TestParseParametersIsStrict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    map[string]string
		binary  map[string][]byte
		want    map[string]any
		wantErr string
	}{
		{name: "empty", want: map[string]any{}},
		{name: "every key", data: map[string]string{
			"replicas": "3", "externalTrafficPolicy": "Local", "trustedHops": "1",
			"requestHeaderTimeout": "5s", "idleTimeout": "2m", "streamIdleTimeout": "10m", "tcpIdleTimeout": "24h", "proxyProtocol": "true",
		}, want: map[string]any{
			"replicas": 3, "externalTrafficPolicy": "Local", "trustedHops": 1,
			"requestHeaderTimeout": 5 * time.Second, "idleTimeout": 2 * time.Minute, "streamIdleTimeout": 10 * time.Minute, "tcpIdleTimeout": 24 * time.Hour,
			"proxyProtocol": true,
		}},
		{name: "proxyProtocol off", data: map[string]string{"proxyProtocol": "false"}, want: map[string]any{"proxyProtocol": false}},
		{name: "proxyProtocol in capitals", data: map[string]string{"proxyProtocol": "True"}, wantErr: `key "proxyProtocol": "True" is not true or false`},
		{name: "proxyProtocol as a number", data: map[string]string{"proxyProtocol": "1"}, wantErr: `key "proxyProtocol": "1" is not true or false`},
		{name: "proxyProtocol as a version", data: map[string]string{"proxyProtocol": "v2"}, wantErr: `key "proxyProtocol"`},
		{name: "proxyProtocol empty", data: map[string]string{"proxyProtocol": ""}, wantErr: `key "proxyProtocol": "" is not true or false`},
		{name: "bounds inclusive", data: map[string]string{"replicas": "20", "trustedHops": "0", "idleTimeout": "1s"},
			want: map[string]any{"replicas": 20, "trustedHops": 0, "idleTimeout": time.Second}},
		{name: "a typo", data: map[string]string{"replica": "3"}, wantErr: `key "replica" is not a setting (known: replicas,`},
		{name: "no replicas", data: map[string]string{"replicas": "0"}, wantErr: `key "replicas": "0" is not a whole number from 1 to 20`},
		{name: "too many replicas", data: map[string]string{"replicas": "21"}, wantErr: `key "replicas": "21" is not`},
		{name: "replicas with a space", data: map[string]string{"replicas": " 3"}, wantErr: `key "replicas"`},
		{name: "a policy in lower case", data: map[string]string{"externalTrafficPolicy": "local"}, wantErr: `key "externalTrafficPolicy": "local" is not one of Cluster, Local`},
		{name: "negative hops", data: map[string]string{"trustedHops": "-1"}, wantErr: `key "trustedHops": "-1" is not a whole number from 0 to 10`},
		{name: "too many hops", data: map[string]string{"trustedHops": "11"}, wantErr: `key "trustedHops"`},
		{name: "a duration without unit", data: map[string]string{"idleTimeout": "60"}, wantErr: `key "idleTimeout": "60" is not a duration from 1s to 24h0m0s`},
		{name: "a duration too short", data: map[string]string{"requestHeaderTimeout": "500ms"}, wantErr: `key "requestHeaderTimeout": "500ms"`},
		{name: "a duration too long", data: map[string]string{"tcpIdleTimeout": "25h"}, wantErr: `key "tcpIdleTimeout": "25h"`},
		{name: "the first bad key by name", data: map[string]string{"replicas": "x", "idleTimeout": "y"}, wantErr: `key "idleTimeout"`},
		{name: "binary data", binary: map[string][]byte{"replicas": []byte("3")}, wantErr: "binaryData is not read"},
		{name: "accessLog Off", data: map[string]string{"accessLog": "Off"}, want: map[string]any{"accessLog": 0.0}},
		{name: "accessLog All", data: map[string]string{"accessLog": "All"}, want: map[string]any{"accessLog": 1.0}},
		{name: "accessLog a fraction", data: map[string]string{"accessLog": "0.01"}, want: map[string]any{"accessLog": 0.01}},
		{name: "accessLog 1", data: map[string]string{"accessLog": "1"}, want: map[string]any{"accessLog": 1.0}},
		{name: "accessLog .5", data: map[string]string{"accessLog": ".5"}, want: map[string]any{"accessLog": 0.5}},
		{name: "accessLog in lower case", data: map[string]string{"accessLog": "all"}, wantErr: `key "accessLog": "all" is not Off, All or a fraction above 0 and at most 1`},
		{name: "accessLog zero", data: map[string]string{"accessLog": "0"}, wantErr: `key "accessLog": "0" is not Off, All`},
		{name: "accessLog above one", data: map[string]string{"accessLog": "1.5"}, wantErr: `key "accessLog": "1.5"`},
		{name: "accessLog negative", data: map[string]string{"accessLog": "-0.1"}, wantErr: `key "accessLog": "-0.1"`},
		{name: "accessLog an exponent", data: map[string]string{"accessLog": "1e-2"}, wantErr: `key "accessLog": "1e-2"`},
		{name: "accessLog a percentage", data: map[string]string{"accessLog": "1%"}, wantErr: `key "accessLog": "1%"`},
		{name: "accessLog two dots", data: map[string]string{"accessLog": "0.1.2"}, wantErr: `key "accessLog": "0.1.2"`},
		{name: "accessLog empty", data: map[string]string{"accessLog": ""}, wantErr: `key "accessLog": ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := makeConfigMap("ns", "p", tc.data)
			cm.BinaryData = tc.binary
			got, err := parseParameters(cm)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A Gateway's values override its class's key by key; what neither gives
// is the default, and a data plane setting only when one is given.
func TestMergeParametersGatewayOverClass(t *testing.T) {
	for _, tc := range []struct {
		name           string
		class, gateway map[string]any
		want           parameters
	}{
		{name: "none", want: defaultParameters()},
		{name: "the class's", class: map[string]any{"replicas": 3, "idleTimeout": time.Minute * 2},
			want: parameters{replicas: ptrTo(int32(3)), externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, settings: &dataplane.Settings{IdleTimeout: 2 * time.Minute}}},
		{name: "the Gateway's over the class's",
			class:   map[string]any{"replicas": 3, "externalTrafficPolicy": "Local", "trustedHops": 2},
			gateway: map[string]any{"replicas": 1, "trustedHops": 0},
			want:    parameters{replicas: ptrTo(int32(1)), externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, settings: &dataplane.Settings{}}},
		{name: "proxyProtocol the class's, turned off by the Gateway", class: map[string]any{"proxyProtocol": true}, gateway: map[string]any{"proxyProtocol": false},
			want: parameters{externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, settings: &dataplane.Settings{}}},
		{name: "proxyProtocol the class's", class: map[string]any{"proxyProtocol": true},
			want: parameters{externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, settings: &dataplane.Settings{ProxyProtocol: true}}},
		{name: "accessLog sampled", gateway: map[string]any{"accessLog": 0.01},
			want: parameters{externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, settings: &dataplane.Settings{AccessLog: 0.01}}},
		{name: "accessLog the class's, turned off by the Gateway: no settings", class: map[string]any{"accessLog": 1.0}, gateway: map[string]any{"accessLog": 0.0},
			want: defaultParameters()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeParameters(tc.class, tc.gateway); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v (settings %+v), want %+v (settings %+v)", got, got.settings, tc.want, tc.want.settings)
			}
		})
	}
}

// A reference to anything but a labelled ConfigMap that exists and holds
// valid keys is refused, with a message that says which reference and why.
func TestResolveParametersRefusals(t *testing.T) {
	cms := map[types.NamespacedName]*corev1.ConfigMap{
		{Namespace: "infra", Name: "class"}: makeConfigMap("infra", "class", map[string]string{"replicas": "3", "trustedHops": "1"}),
		{Namespace: "edge", Name: "gw"}:     makeConfigMap("edge", "gw", map[string]string{"replicas": "4"}),
		{Namespace: "edge", Name: "bad"}:    makeConfigMap("edge", "bad", map[string]string{"idleTimeout": "forever"}),
	}
	classRef := func(group, kind, ns, name string) *gwv1.ParametersReference {
		r := &gwv1.ParametersReference{Group: gwv1.Group(group), Kind: gwv1.Kind(kind), Name: name}
		if ns != "" {
			r.Namespace = ptrTo(gwv1.Namespace(ns))
		}
		return r
	}
	ownRef := func(group, kind, name string) *gwv1.LocalParametersReference {
		return &gwv1.LocalParametersReference{Group: gwv1.Group(group), Kind: gwv1.Kind(kind), Name: name}
	}
	for _, tc := range []struct {
		name     string
		class    *gwv1.ParametersReference
		own      *gwv1.LocalParametersReference
		unserved bool
		want     parameters
		wantMsg  string
	}{
		{name: "none", want: defaultParameters()},
		{name: "the class's and the Gateway's", class: classRef("", "ConfigMap", "infra", "class"), own: ownRef("", "ConfigMap", "gw"),
			want: parameters{replicas: ptrTo(int32(4)), externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, settings: &dataplane.Settings{TrustedHops: 1}}},
		{name: "a class's CRD", class: classRef("example.com", "Params", "infra", "class"),
			wantMsg: `the GatewayClass's parametersRef: Params.example.com class is not read: name a ConfigMap (group "", kind ConfigMap)`},
		{name: "a Secret", own: ownRef("", "Secret", "gw"), wantMsg: "spec.infrastructure.parametersRef: Secret gw is not read"},
		{name: "a class's without namespace", class: classRef("", "ConfigMap", "", "class"), wantMsg: "a GatewayClass's parametersRef needs a namespace"},
		{name: "missing", own: ownRef("", "ConfigMap", "nope"), wantMsg: "spec.infrastructure.parametersRef: ConfigMap edge/nope not found (only ConfigMaps labelled gateway.outrigger.dev/parameters are read)"},
		{name: "another namespace's is not the Gateway's", own: ownRef("", "ConfigMap", "class"), wantMsg: "ConfigMap edge/class not found"},
		{name: "an invalid value", class: classRef("", "ConfigMap", "infra", "class"), own: ownRef("", "ConfigMap", "bad"),
			wantMsg: `spec.infrastructure.parametersRef: ConfigMap edge/bad: key "idleTimeout": "forever" is not a duration`},
		{name: "ConfigMaps not watched", own: ownRef("", "ConfigMap", "gw"), unserved: true, wantMsg: "Outrigger may not watch ConfigMaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "gw"}}
			if tc.own != nil {
				gw.Spec.Infrastructure = &gwv1.GatewayInfrastructure{ParametersRef: tc.own}
			}
			w := &world{gateway: gw, classParameters: tc.class, configMaps: cms, parametersServed: !tc.unserved}
			got, msg := resolveParameters(w)
			if tc.wantMsg != "" {
				if !strings.Contains(msg, tc.wantMsg) {
					t.Fatalf("message %q, want one containing %q", msg, tc.wantMsg)
				}
				return
			}
			if msg != "" {
				t.Fatalf("refused: %s", msg)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v (settings %+v), want %+v (settings %+v)", got, got.settings, tc.want, tc.want.settings)
			}
		})
	}
}

// The data plane's pods: exactly as many as the parameters give; without
// them at least two, more made by hand kept. Their disruption budget keeps
// one serving when there are two or more, and lets a single one be
// drained.
func TestReplicasAndDisruptionBudget(t *testing.T) {
	for _, tc := range []struct {
		given, cur *int32
		want       int32
	}{
		{want: 2}, {cur: ptrTo(int32(1)), want: 2}, {cur: ptrTo(int32(5)), want: 5},
		{given: ptrTo(int32(1)), cur: ptrTo(int32(5)), want: 1}, {given: ptrTo(int32(7)), want: 7},
	} {
		if got := (parameters{replicas: tc.given}).replicasFor(tc.cur); got != tc.want {
			t.Errorf("given %v, current %v: %d, want %d", ptrValue(tc.given), ptrValue(tc.cur), got, tc.want)
		}
	}
	sel := map[string]string{"a": "b"}
	if b := disruptionBudget(2, sel); b.MinAvailable == nil || *b.MinAvailable != intstr.FromInt32(1) || b.MaxUnavailable != nil {
		t.Errorf("two replicas: %+v", b)
	}
	if b := disruptionBudget(1, sel); b.MinAvailable != nil || b.MaxUnavailable == nil || *b.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("one replica: %+v", b)
	}
}
