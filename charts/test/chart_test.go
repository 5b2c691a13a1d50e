// Package charttest renders the Helm chart charts/outrigger with Helm's own
// Go packages (what `helm template` and `helm install` run) and checks the
// objects against deploy/, Outrigger's flag set and a real API server.
package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/outrigger-ccm/outrigger/pkg/dev/controlplane"
)

const (
	chartDir  = "../outrigger"
	deployDir = "../../deploy"
	// The namespace deploy/ installs into, and the one the chart's docs
	// tell users to install into.
	namespace   = "kube-system"
	releaseName = "outrigger"
)

// loadChart loads the chart from its directory, as `helm install ./chart`.
func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return c
}

// userValues merges a values file's text and --set expressions, as the helm
// command line does (-f first, then --set).
func userValues(valuesYAML string, sets ...string) (map[string]any, error) {
	vals, err := chartutil.ReadValues([]byte(valuesYAML))
	if err != nil {
		return nil, fmt.Errorf("reading values: %w", err)
	}
	m := vals.AsMap()
	for _, s := range sets {
		if err := strvals.ParseInto(s, m); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return m, nil
}

// render is `helm template outrigger charts/outrigger -n kube-system -f
// <valuesYAML> --set <sets>...`.
func render(t testing.TB, valuesYAML string, sets ...string) (*release.Release, error) {
	t.Helper()
	vals, err := userValues(valuesYAML, sets...)
	if err != nil {
		return nil, err
	}
	install := action.NewInstall(&action.Configuration{Log: t.Logf})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = releaseName
	install.Namespace = namespace
	// The helm binary knows the Kubernetes version it was built against; a
	// library user says which it renders for (`helm template
	// --kube-version`): the API server the integration tests run.
	v, err := semver.NewVersion(controlplane.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's version: %w", err)
	}
	install.KubeVersion = &chartutil.KubeVersion{Version: "v" + v.String(), Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor())}
	return install.Run(loadChart(t), vals)
}

// decodeObjects splits a multi-document manifest into objects.
func decodeObjects(t testing.TB, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decoding manifest: %v\n%s", err, manifest)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// renderObjects renders and decodes, failing the test on any error.
func renderObjects(t testing.TB, valuesYAML string, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	rel, err := render(t, valuesYAML, sets...)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return decodeObjects(t, []byte(rel.Manifest))
}

// deployObjects reads a manifest of deploy/.
func deployObjects(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, raw)
}

func objectKey(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// byKind picks the objects of the given kinds, keyed by kind, namespace and
// name.
func byKind(objs []*unstructured.Unstructured, kinds ...string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		for _, k := range kinds {
			if o.GetKind() == k {
				out[objectKey(o)] = o
			}
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
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

func joinLines(ss []string) string { return "\n  " + strings.Join(ss, "\n  ") }
