// Package e2e holds what the e2e images add to agnhost (wgetrc), and the
// check that `make e2e-images` names them as the suite asks.
package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"

	imageutils "k8s.io/kubernetes/test/utils/image"
)

// TestImageTagsAreTheSuites checks that the images `make e2e-images` packs
// carry the tags that this module's e2e.test asks for
// (test/utils/image/manifest.go): a tag the nodes lack would make the
// kubelet try to pull, and nothing is pulled.
func TestImageTagsAreTheSuites(t *testing.T) {
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	agnhost := regexp.MustCompile(`(?m)^E2E_AGNHOST_VERSION := (\S+)$`).FindSubmatch(mk)
	if agnhost == nil {
		t.Fatal("Makefile: no E2E_AGNHOST_VERSION")
	}
	for _, tc := range []struct {
		image imageutils.ImageID
		made  string
	}{
		{imageutils.Agnhost, "agnhost:" + string(agnhost[1])},
		{imageutils.Pause, pauseTag(t, mk)},
	} {
		want := imageutils.GetE2EImage(tc.image)
		if !strings.HasSuffix(want, "/"+tc.made) {
			t.Errorf("make e2e-images packs %s; the suite asks for %s", tc.made, want)
		}
	}
}

// pauseTag is the name:tag the e2e pause image is packed as.
func pauseTag(t *testing.T, mk []byte) string {
	m := regexp.MustCompile(`(?m)^E2E_PAUSE_VERSION := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no E2E_PAUSE_VERSION")
	}
	return "pause:" + string(m[1])
}
