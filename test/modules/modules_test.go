// Package modules_test checks that the repository's Go modules build every
// package they share from the same source: a package the root module and
// the control plane module (Kubernetes built from source) both compile is
// compiled once per machine only when both resolve it to the same module
// version, and so are all its dependencies. One version apart (say
// golang.org/x/sys) and Go's build cache holds two copies of client-go,
// apimachinery and the API types, one per module, and a fresh machine's
// `make test` compiles them twice.
package modules_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// kubernetesBuilds are what the control plane module builds in `make test`:
// the control plane, the real cluster's binaries and the e2e suite.
var kubernetesBuilds = []string{
	"k8s.io/kubernetes/cmd/kube-apiserver",
	"k8s.io/kubernetes/cmd/kubectl",
	"k8s.io/kubernetes/cmd/kubelet",
	"k8s.io/kubernetes/cmd/kube-proxy",
	"k8s.io/kubernetes/cmd/kube-controller-manager",
	"k8s.io/kubernetes/cmd/kube-scheduler",
	"k8s.io/kubernetes/test/e2e",
	"go.etcd.io/etcd/server/v3",
}

// source is where a package comes from: its directory (the same directory
// is the same source) and, to name it, its module and version.
type source struct{ dir, module string }

// sources lists the source of every non-standard package the patterns need
// in dir's module.
func sources(t *testing.T, dir string, args ...string) map[string]source {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{if .Module}}{{.ImportPath}} {{.Dir}} {{with .Module.Replace}}{{.Path}}@{{.Version}}{{else}}{{.Module.Path}}@{{.Module.Version}}{{end}}{{end}}`}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr.String())
	}
	pkgs := map[string]source{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Test variants ("p [q.test]") are a module's own packages.
		if len(f) == 3 {
			pkgs[f[0]] = source{dir: f[1], module: f[2]}
		}
	}
	return pkgs
}

func TestSharedPackagesHaveOneSource(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the Kubernetes build's packages")
	}
	rootPkgs := sources(t, root, "-tags", "integration", "-test", "./...")
	for _, other := range []struct {
		dir  string
		args []string
	}{
		{root + "/controlplane", kubernetesBuilds},
		{root + "/bench/upstream-ccm", []string{"./..."}},
		{root + "/charts/test", []string{"-test", "./..."}},
		{root + "/examples/aws", []string{"-test", "./..."}},
		{root + "/test/providers", []string{"-test", "./..."}},
		{root + "/tools/release", []string{"-test", "./..."}},
	} {
		pkgs := sources(t, other.dir, other.args...)
		shared, differ := 0, map[string]bool{}
		for path, src := range pkgs {
			rs, ok := rootPkgs[path]
			if !ok {
				continue
			}
			shared++
			if rs.dir != src.dir {
				differ[fmt.Sprintf("%s here, %s in the root module", src.module, rs.module)] = true
			}
		}
		if shared == 0 {
			t.Errorf("%s shares no package with the root module: the check lists the wrong builds", other.dir)
		}
		if len(differ) > 0 {
			var lines []string
			for l := range differ {
				lines = append(lines, l)
			}
			sort.Strings(lines)
			t.Errorf("%s resolves modules whose packages the root module also builds to other versions, so a fresh machine compiles them twice; require the root module's version there (go get module@version):\n%s",
				other.dir, strings.Join(lines, "\n"))
		}
	}
}
