package charttest

import (
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Short names for the tests of this package, which render into Namespace.
var (
	objectKey = ObjectKey
	byKind    = ByKind
	joinLines = JoinLines
)

func keys[V any](m map[string]V) []string { return Keys(m) }

func render(t testing.TB, valuesYAML string, sets ...string) (*release.Release, error) {
	t.Helper()
	return Render(Namespace, valuesYAML, sets...)
}

const namespace = Namespace

// renderObjects renders and decodes, failing the test on any error.
func renderObjects(t testing.TB, valuesYAML string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	rel, err := render(t, valuesYAML, sets...)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	objs, err := Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatalf("%v\n%s", err, rel.Manifest)
	}
	return objs
}

// deployObjects reads a manifest of deploy/.
func deployObjects(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(DeployDir(), file))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(raw)
	if err != nil {
		t.Fatalf("deploy/%s: %v", file, err)
	}
	return objs
}

// only returns the one object of a kind, failing when there is not exactly
// one.
func only(t testing.TB, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	m := byKind(objs, kind)
	if len(m) != 1 {
		t.Fatalf("want one %s, rendered %v", kind, keys(m))
	}
	for _, o := range m {
		return o
	}
	return nil
}
