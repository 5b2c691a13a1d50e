package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ from what compile returns")

// goldenController is the GatewayClass controllerName of every golden case.
const goldenController = "outrigger.dev/golden"

// goldenStatus is every status compile decides, as a golden file holds
// it: route parents sorted by kind, namespace and name.
type goldenStatus struct {
	Accepted       metav1.Condition      `json:"accepted"`
	Listeners      []gwv1.ListenerStatus `json:"listeners,omitempty"`
	Ports          []corev1.ServicePort  `json:"ports,omitempty"`
	Routes         []goldenRoute         `json:"routes,omitempty"`
	MissingSecrets bool                  `json:"missingSecrets,omitempty"`
	// Parameters are the Service's and Deployment's settings, when not
	// the defaults (the data plane's are in config.json).
	Parameters *goldenParameters `json:"parameters,omitempty"`
	// ListenerSets are the statuses of the ListenerSets naming the
	// Gateway, and AttachedListenerSets how many it takes.
	ListenerSets         []goldenSet `json:"listenerSets,omitempty"`
	AttachedListenerSets int32       `json:"attachedListenerSets,omitempty"`
}

type goldenSet struct {
	Name      string                `json:"name"`
	Accepted  metav1.Condition      `json:"accepted"`
	Listeners []gwv1.ListenerStatus `json:"listeners,omitempty"`
}

type goldenParameters struct {
	Replicas              *int32 `json:"replicas,omitempty"`
	ExternalTrafficPolicy string `json:"externalTrafficPolicy"`
}

type goldenRoute struct {
	Kind      string                   `json:"kind"`
	Namespace string                   `json:"namespace"`
	Name      string                   `json:"name"`
	Parents   []gwv1.RouteParentStatus `json:"parents"`
}

// TestCompileGolden compiles each testdata/<case>/world.yaml (a Gateway
// and the objects it refers to, as YAML documents) and compares the data
// plane's configuration with config.json and every status with
// status.yaml; -update rewrites both. It also holds compile to its word:
// the world it read is unchanged.
func TestCompileGolden(t *testing.T) {
	cases, err := filepath.Glob(filepath.Join("testdata", "*", "world.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 8 {
		t.Fatalf("%d golden cases found in testdata/, want at least 8", len(cases))
	}
	for _, path := range cases {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			w := loadWorld(t, path)
			before, fields := snapshot(w), *w
			res := compile(w)
			if after := snapshot(w); !equality.Semantic.DeepEqual(before, after) || !reflect.DeepEqual(fields, *w) {
				t.Errorf("compile changed its input world")
			}

			config, err := json.MarshalIndent(res.config, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			status, err := yaml.Marshal(goldenStatusOf(res))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "config.json"), append(config, '\n'))
			golden(t, filepath.Join(dir, "status.yaml"), status)
		})
	}
}

// golden compares got with the file at path, or writes it with -update.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what compile returns (run with -update to rewrite it, then read the diff):\n%s", path, lineDiff(string(want), string(got)))
	}
}

// lineDiff lists the lines of want and got that differ, by line number.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, w, g)
		}
	}
	return b.String()
}

func goldenStatusOf(res *result) goldenStatus {
	out := goldenStatus{Accepted: res.accepted, Listeners: res.listeners, Ports: res.ports, MissingSecrets: res.missingSecrets}
	if p := res.params; p.replicas != nil || p.externalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster {
		out.Parameters = &goldenParameters{Replicas: p.replicas, ExternalTrafficPolicy: string(p.externalTrafficPolicy)}
	}
	for _, s := range res.sets {
		out.ListenerSets = append(out.ListenerSets, goldenSet{Name: s.key.String(), Accepted: s.accepted, Listeners: s.listeners})
	}
	out.AttachedListenerSets = res.attachedSets
	for key, parents := range res.routeParents {
		out.Routes = append(out.Routes, goldenRoute{Kind: key.kind, Namespace: key.name.Namespace, Name: key.name.Name, Parents: parents})
	}
	slices.SortFunc(out.Routes, func(a, b goldenRoute) int {
		return strings.Compare(a.Kind+" "+a.Namespace+"/"+a.Name, b.Kind+" "+b.Namespace+"/"+b.Name)
	})
	return out
}

// loadWorld reads a golden case's world: one Gateway, and any routes,
// Services, Secrets (stringData merged into data, as the API server
// does), ReferenceGrants, Namespaces and a GatewayClass (whose
// parametersRef the Gateway's acceptance reads). Every route kind is
// served.
func loadWorld(t *testing.T, path string) *world {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return worldOf(t, path, data)
}

// worldOf is the world of YAML documents, as loadWorld reads them; name
// names them in errors.
func worldOf(t *testing.T, name string, data []byte) *world {
	t.Helper()
	w := &world{
		controller: goldenController,
		kinds:      servedKinds(true, true),
		services:   map[types.NamespacedName]*corev1.Service{},
		secrets:    map[types.NamespacedName]*corev1.Secret{},
		namespaces: map[string]*corev1.Namespace{},
		configMaps: map[types.NamespacedName]*corev1.ConfigMap{},
		// As where Outrigger may watch ConfigMaps.
		parametersServed: true,
	}
	decoder := serializer.NewCodecFactory(clientgoscheme.Scheme).UniversalDeserializer()
	reader := yamlutil.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		addToWorld(t, w, obj)
	}
	if w.gateway == nil {
		t.Fatalf("%s holds no Gateway", name)
	}
	// As the reconciler gathers them: those naming the Gateway.
	w.listenerSets = slices.DeleteFunc(w.listenerSets, func(s *gwv1.ListenerSet) bool { return !setNames(s, w.gateway) })
	// Routes in the order the reconciler gathers them: by kind.
	slices.SortStableFunc(w.routes, func(a, b route) int {
		return slices.Index(routeKindTable, a.kind) - slices.Index(routeKindTable, b.kind)
	})
	return w
}

func addToWorld(t *testing.T, w *world, obj runtime.Object) {
	t.Helper()
	switch o := obj.(type) {
	case *gwv1.Gateway:
		if w.gateway != nil {
			t.Fatalf("two Gateways: %s and %s", w.gateway.Name, o.Name)
		}
		w.gateway = o
	case *gwv1.GatewayClass:
		w.classParameters = o.Spec.ParametersRef
	case *corev1.ConfigMap:
		w.configMaps[client.ObjectKeyFromObject(o)] = o
	case *corev1.Service:
		w.services[client.ObjectKeyFromObject(o)] = o
	case *corev1.Secret:
		for k, v := range o.StringData {
			if o.Data == nil {
				o.Data = map[string][]byte{}
			}
			o.Data[k] = []byte(v)
		}
		o.StringData = nil
		w.secrets[client.ObjectKeyFromObject(o)] = o
	case *gwv1.ReferenceGrant:
		w.grants = append(w.grants, o)
	case *corev1.Namespace:
		w.namespaces[o.Name] = o
	case *gwv1.ListenerSet:
		// Those naming the Gateway are kept once it is read (worldOf).
		w.listenerSets = append(w.listenerSets, o)
	default:
		w.routes = append(w.routes, routesOf(obj.(client.Object))...)
	}
}

// snapshot is a deep copy of everything a world holds.
func snapshot(w *world) []runtime.Object {
	out := []runtime.Object{w.gateway.DeepCopy()}
	for _, rt := range w.routes {
		out = append(out, rt.obj.DeepCopyObject())
	}
	for _, key := range sortedKeys(w.services) {
		out = append(out, w.services[key].DeepCopy())
	}
	for _, key := range sortedKeys(w.secrets) {
		out = append(out, w.secrets[key].DeepCopy())
	}
	for _, g := range w.grants {
		out = append(out, g.DeepCopy())
	}
	for _, s := range w.listenerSets {
		out = append(out, s.DeepCopy())
	}
	for _, key := range sortedKeys(w.configMaps) {
		out = append(out, w.configMaps[key].DeepCopy())
	}
	names := slices.Sorted(maps.Keys(w.namespaces))
	for _, n := range names {
		out = append(out, w.namespaces[n].DeepCopy())
	}
	return out
}

func sortedKeys[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return keys
}

// TestSnapshotSeesChanges holds the purity check of TestCompileGolden to
// its word: a world changed the way compile used to change it (a field
// written) or deeper (a route's status) is seen.
func TestSnapshotSeesChanges(t *testing.T) {
	w := loadWorld(t, filepath.Join("testdata", "grpc", "world.yaml"))
	before := snapshot(w)
	rt := w.routes[0]
	statuses := rt.kind.parentStatuses(rt.obj)
	*statuses = append(*statuses, gwv1.RouteParentStatus{ControllerName: "x"})
	if equality.Semantic.DeepEqual(before, snapshot(w)) {
		t.Errorf("a route's status written is not seen by snapshot")
	}
}
