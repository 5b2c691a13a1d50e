package tools

import (
	"os"
	"regexp"
	"strings"
	"testing"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

// TestMatrixSettings checks the Makefile's e2e-matrix line for this
// module's Kubernetes version: it names this module, and the e2e image tags
// are those this version's e2e.test asks for (test/utils/image/manifest.go),
// since a tag the nodes lack makes the kubelet try a pull.
func TestMatrixSettings(t *testing.T) {
	checkMatrixSettings(t, "controlplane/versions/v1.36")
}

func checkMatrixSettings(t *testing.T, module string) {
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	req := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)$`).FindSubmatch(gomod)
	if req == nil {
		t.Fatal("go.mod does not require k8s.io/kubernetes")
	}
	version := string(req[1])
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^E2E_MATRIX_` + regexp.QuoteMeta(version) + ` := (.*)$`).FindSubmatch(mk)
	if line == nil {
		t.Fatalf("Makefile: no E2E_MATRIX_%s", version)
	}
	set := map[string]string{}
	for _, kv := range strings.Fields(string(line[1])) {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	if set["K8S_MODULE"] != module {
		t.Errorf("E2E_MATRIX_%s builds in %q, want %q", version, set["K8S_MODULE"], module)
	}
	for _, tc := range []struct {
		image imageutils.ImageID
		made  string
	}{
		{imageutils.Agnhost, "agnhost:" + set["E2E_AGNHOST_VERSION"]},
		{imageutils.Pause, "pause:" + set["E2E_PAUSE_VERSION"]},
	} {
		if want := imageutils.GetE2EImage(tc.image); !strings.HasSuffix(want, "/"+tc.made) {
			t.Errorf("E2E_MATRIX_%s packs %s; the suite asks for %s", version, tc.made, want)
		}
	}
}
