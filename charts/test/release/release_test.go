// Package release_test checks the release's files as docs/install.md uses
// them: the image tarball, unpacked to an OCI layout and pushed with crane
// to a registry (one in this process, on loopback), pulls back as built, and
// the packaged chart, its image.repository set to that registry, runs what
// was pushed.
package release_test

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	charttest "github.com/outrigger-ccm/outrigger/charts/test"
	"github.com/outrigger-ccm/outrigger/internal/version"
)

// The image as make image builds it.
const (
	entrypoint = "/usr/local/bin/outrigger"
	uid        = "65532"
)

var root = filepath.Join(charttest.Dir(), "..", "..")

// TestPushImageInstallChart pushes the image tarball to a registry with
// crane as docs/install.md does (tar -xf into a directory, crane push
// DIR), pulls it back, and renders the packaged chart pointed at that
// registry. It takes the release's files when make release (or make image)
// built them; else it packages the chart itself and checks a small image
// ocitar builds as make image does, and says so by skipping at the end.
func TestPushImageInstallChart(t *testing.T) {
	imageTar, substitute := imageTarball(t)
	chartTgz := packagedChart(t)

	// The image's name and tag: the chart's default image, at the version.
	img, desc, err := charttest.LoadImage(imageTar, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != version.Version {
		t.Errorf("%s is tagged %q, want the version %q (a stale file? make image builds it)", imageTar, got, version.Version)
	}
	repo, digest := defaultImage(t, chartTgz)
	if got, want := desc.Annotations["io.containerd.image.name"], repo+":"+version.Version; got != want {
		t.Errorf("ctr image import names %s %q, want the chart's default image %q", imageTar, got, want)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("the registry listens on %s, want loopback", host)
	}
	ref := host + "/outrigger:" + version.Version
	opts := []crane.Option{crane.WithAuth(authn.Anonymous)}
	if err := crane.Push(img, ref, opts...); err != nil {
		t.Fatalf("crane push %s: %v", ref, err)
	}

	pulled, err := crane.Pull(ref, opts...)
	if err != nil {
		t.Fatalf("crane pull %s: %v", ref, err)
	}
	if got, err := pulled.Digest(); err != nil || got != desc.Digest {
		t.Errorf("pulled %s: digest %v (%v), want the tarball's %v", ref, got, err, desc.Digest)
	}
	if tags, err := crane.ListTags(host+"/outrigger", opts...); err != nil || !slices.Equal(tags, []string{version.Version}) {
		t.Errorf("the registry's tags of outrigger: %v (%v), want [%s]", tags, err, version.Version)
	}
	cf, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) {
		t.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, entrypoint)
	}
	if u, _, _ := strings.Cut(cf.Config.User, ":"); u != uid {
		t.Errorf("user %q, want %s", cf.Config.User, uid)
	}
	if mode, err := fileMode(pulled, entrypoint); err != nil {
		t.Errorf("pulled %s: %v", ref, err)
	} else if mode&0o111 == 0 {
		t.Errorf("pulled %s: %s has mode %v, not executable", ref, entrypoint, mode)
	}

	// helm install --set image.repository=<registry>/outrigger runs the
	// pushed image: by its digest when the chart was released with it
	// (make release), else by the tag.
	want := ref
	if digest != "" {
		if digest != desc.Digest.String() {
			t.Errorf("%s: image.digest %s, the image's is %s", chartTgz, digest, desc.Digest)
		}
		want = host + "/outrigger@" + digest
	}
	rel, err := charttest.RenderArchive(chartTgz, charttest.Namespace, "", "cloudProvider=sim", "image.repository="+host+"/outrigger")
	if err != nil {
		t.Fatalf("rendering %s: %v", chartTgz, err)
	}
	objs, err := charttest.Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	deps := charttest.ByKind(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%s renders Deployments %v, want one", chartTgz, charttest.Keys(deps))
	}
	for _, d := range deps {
		images := containerImages(t, d)
		if !slices.Equal(images, []string{want}) {
			t.Fatalf("%s runs %q, want [%s]", charttest.ObjectKey(d), images, want)
		}
		if got, err := crane.Digest(images[0], opts...); err != nil || got != desc.Digest.String() {
			t.Errorf("%s's image %s resolves to %s (%v), want what was pushed, %s", charttest.ObjectKey(d), images[0], got, err, desc.Digest)
		}
	}

	if substitute != "" && !t.Failed() {
		t.Skip(substitute)
	}
}

// imageTarball returns the release's image tarball, or make image's, or
// else one ocitar builds as make image does around a small file, with a
// sentence saying so.
func imageTarball(t *testing.T) (file, substitute string) {
	for _, f := range []string{
		filepath.Join(root, "bin", "release", "outrigger-image-v"+version.Version+".tar"),
		filepath.Join(root, "bin", "outrigger-image.tar"),
	} {
		if _, err := os.Stat(f); err == nil {
			t.Logf("pushing %s", f)
			return f, ""
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "outrigger")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(dir, "outrigger-image.tar")
	// make image's ocitar flags, the binaries a small file.
	cmd := exec.Command("go", "run", "./images/ocitar", "-name", "outrigger.local/outrigger:"+version.Version, "-o", file, "-user", uid+":"+uid,
		"-file", bin+"="+entrypoint, "-file", bin+"=/usr/local/bin/outrigger-local-lb",
		"-link", "/usr/local/bin/cloud-controller-manager=outrigger", "--", entrypoint)
	cmd.Dir = filepath.Join(root, "controlplane")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return file, "checked a small image ocitar built as make image does: bin/outrigger-image.tar is absent (make image or make release builds it)"
}

// packagedChart returns the chart make release packaged, or packages it
// into a temporary directory the same way.
func packagedChart(t *testing.T) string {
	f := filepath.Join(root, "bin", "release", "outrigger-"+version.Version+".tgz")
	if _, err := os.Stat(f); err == nil {
		t.Logf("rendering %s", f)
		return f
	}
	f, err := charttest.Package(charttest.Dir(), t.TempDir(), version.Version)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rendering %s (bin/release has no packaged chart: make release)", f)
	return f
}

// defaultImage is the packaged chart's default image.repository and
// image.digest (empty unless make release packaged it).
func defaultImage(t *testing.T, chartTgz string) (repo, digest string) {
	c, err := loader.Load(chartTgz)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := c.Values["image"].(map[string]any)
	repo, _ = img["repository"].(string)
	if repo == "" {
		t.Fatalf("%s: no default image.repository in %v", chartTgz, c.Values)
	}
	digest, _ = img["digest"].(string)
	return repo, digest
}

// fileMode finds a regular file in the image's layers (the last layer
// that has it).
func fileMode(img v1.Image, file string) (os.FileMode, error) {
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	want := strings.TrimPrefix(path.Clean(file), "/")
	for i := len(layers) - 1; i >= 0; i-- {
		rc, err := layers[i].Uncompressed()
		if err != nil {
			return 0, err
		}
		mode, found, err := findInTar(rc, want)
		rc.Close()
		if err != nil || found {
			return mode, err
		}
	}
	return 0, fmt.Errorf("no %s in the image", file)
}

func findInTar(r io.Reader, name string) (os.FileMode, bool, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") != name {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return 0, true, fmt.Errorf("%s is not a regular file (type %q)", name, h.Typeflag)
		}
		return h.FileInfo().Mode(), true, nil
	}
}

// containerImages lists the images of a workload's containers.
func containerImages(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, c := range cs {
		m, _ := c.(map[string]any)
		img, _ := m["image"].(string)
		images = append(images, img)
	}
	return images
}
