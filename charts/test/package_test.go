package charttest

import (
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// A chart packaged with an image digest, as make release packages it: its
// values.yaml (comments kept) carries image.digest, and installed with
// only image.repository set it runs repository@digest, the image a release
// verification checked; the same chart and time give the same bytes. A
// digest of another form is refused.
func TestPackageWithImageDigest(t *testing.T) {
	when := time.Unix(1_700_000_000, 0)
	dir := t.TempDir()
	path, err := PackageWith(Dir(), dir, PackageOptions{ModTime: when, ImageDigest: testDigest})
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range c.Raw {
		if f.Name == "values.yaml" && !strings.Contains(string(f.Data), "\n  # The image's manifest digest") {
			t.Errorf("the packaged values.yaml lost its comments:\n%s", f.Data)
		}
		if f.Name == "values.yaml" && !strings.Contains(string(f.Data), "\n  digest: \""+testDigest+"\"\n") {
			t.Errorf("the packaged values.yaml has no image.digest %s:\n%s", testDigest, f.Data)
		}
	}
	rel, err := RenderArchive(path, Namespace, "", "cloudProvider=sim", "image.repository=registry.example/outrigger")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode([]byte(rel.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(t, objs)
	if got, want := container(t, d).Image, "registry.example/outrigger@"+testDigest; got != want {
		t.Errorf("the packaged chart runs %s, want %s", got, want)
	}

	if _, err := PackageWith(Dir(), t.TempDir(), PackageOptions{ModTime: when, ImageDigest: "sha256:abc"}); err == nil || !strings.Contains(err.Error(), "sha256:<64 hex>") {
		t.Errorf("packaging with digest sha256:abc: %v, want refused", err)
	}
}
