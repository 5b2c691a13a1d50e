// Package charttest renders the Helm chart charts/outrigger with Helm's own
// Go packages, as `helm template` and `helm install` do, for the tests: this
// package's check the objects against deploy/ and Outrigger's flag set,
// apiserver's apply them to a real API server.
package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
)

const (
	// Namespace is the one deploy/ installs into, and the one the chart's
	// docs tell users to install into.
	Namespace = "kube-system"
	// ReleaseName is the release the tests install.
	ReleaseName = "outrigger"
)

// Dir is the chart's directory, found from this file so that tests in any
// directory of the module load the same chart.
func Dir() string { return filepath.Join(moduleDir(), "..", "outrigger") }

// DeployDir is the repository's deploy/, the manifests the chart follows.
func DeployDir() string { return filepath.Join(moduleDir(), "..", "..", "deploy") }

func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Load loads the chart from its directory, as `helm install ./chart`.
func Load() (*chart.Chart, error) {
	c, err := loader.Load(Dir())
	if err != nil {
		return nil, fmt.Errorf("loading the chart from %s: %w", Dir(), err)
	}
	return c, nil
}

// UserValues merges a values file's text and --set expressions, as the helm
// command line does (-f first, then --set).
func UserValues(valuesYAML string, sets ...string) (map[string]any, error) {
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

// Render is `helm template outrigger charts/outrigger -n <namespace> -f
// <valuesYAML> --set <sets>... --kube-version <the tests' API server>`.
func Render(namespace, valuesYAML string, sets ...string) (*release.Release, error) {
	vals, err := UserValues(valuesYAML, sets...)
	if err != nil {
		return nil, err
	}
	c, err := Load()
	if err != nil {
		return nil, err
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = ReleaseName
	install.Namespace = namespace
	// The helm binary knows the Kubernetes version it was built against; a
	// library user says which it renders for (`helm template
	// --kube-version`): the API server the integration tests run.
	v, err := semver.NewVersion(apiserver.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's version: %w", err)
	}
	install.KubeVersion = &chartutil.KubeVersion{Version: "v" + v.String(), Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor())}
	return install.Run(c, vals)
}

// Decode splits a multi-document manifest into objects.
func Decode(manifest []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding the manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// ObjectKey names an object: kind namespace/name.
func ObjectKey(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// ByKind picks the objects of the given kinds, keyed by kind, namespace and
// name.
func ByKind(objs []*unstructured.Unstructured, kinds ...string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		for _, k := range kinds {
			if o.GetKind() == k {
				out[ObjectKey(o)] = o
			}
		}
	}
	return out
}

// Keys returns a map's keys, sorted.
func Keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// JoinLines lists strings one a line, for messages.
func JoinLines(ss []string) string { return "\n  " + strings.Join(ss, "\n  ") }
