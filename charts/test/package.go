package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
)

// Package writes the chart in chartDir to outDir as
// <name>-<version>.tgz, as `helm package` does (Helm's loader, which
// honours .helmignore, then chartutil.Save), and returns the file's path.
// A non-empty version must be the chart's version and appVersion both.
func Package(chartDir, outDir, version string) (string, error) {
	return PackageAt(chartDir, outDir, version, time.Now())
}

// PackageAt is Package with every file of the archive dated modTime
// (chartutil.Save dates them now): the same chart and modTime give the same
// bytes, as a reproducible release needs (make release passes the commit's
// time, SOURCE_DATE_EPOCH).
func PackageAt(chartDir, outDir, version string, modTime time.Time) (string, error) {
	return PackageWith(chartDir, outDir, PackageOptions{Version: version, ModTime: modTime})
}

// PackageOptions say how PackageWith packages a chart.
type PackageOptions struct {
	// Version, when not empty, must be the chart's version and appVersion.
	Version string
	// ModTime dates every file of the archive.
	ModTime time.Time
	// ImageDigest, when not empty, is written as the packaged
	// values.yaml's image.digest (sha256:<64 hex>): the released chart
	// pulls the image a release verification checked, by digest.
	ImageDigest string
}

// imageDigestLine is values.yaml's image.digest as the chart holds it.
const imageDigestLine = "\n  digest: \"\"\n"

// digestPattern is an image manifest digest.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// PackageWith packages the chart in chartDir to outDir as
// <name>-<version>.tgz, as `helm package` does, and returns its path.
func PackageWith(chartDir, outDir string, o PackageOptions) (string, error) {
	c, err := loader.Load(chartDir)
	if err != nil {
		return "", fmt.Errorf("loading the chart from %s: %w", chartDir, err)
	}
	if o.Version != "" && (c.Metadata.Version != o.Version || c.Metadata.AppVersion != o.Version) {
		return "", fmt.Errorf("%s: version %q, appVersion %q, want both %q", chartDir, c.Metadata.Version, c.Metadata.AppVersion, o.Version)
	}
	if o.ImageDigest != "" {
		if err := setImageDigest(c, o.ImageDigest); err != nil {
			return "", fmt.Errorf("%s: %w", chartDir, err)
		}
	}
	path, err := chartutil.Save(c, outDir)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	if err := redate(path, o.ModTime); err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return path, nil
}

// setImageDigest writes digest into the chart's values.yaml as
// image.digest, in the file Helm packages (its comments kept) and in the
// values it loaded.
func setImageDigest(c *chart.Chart, digest string) error {
	if !digestPattern.MatchString(digest) {
		return fmt.Errorf("image digest %q: want sha256:<64 hex>", digest)
	}
	for _, f := range c.Raw {
		if f.Name != chartutil.ValuesfileName {
			continue
		}
		if n := bytes.Count(f.Data, []byte(imageDigestLine)); n != 1 {
			return fmt.Errorf("values.yaml: %d lines %q, want 1", n, strings.TrimSpace(imageDigestLine))
		}
		f.Data = bytes.Replace(f.Data, []byte(imageDigestLine), []byte("\n  digest: \""+digest+"\"\n"), 1)
		img, _ := c.Values["image"].(map[string]any)
		if img == nil {
			return fmt.Errorf("values.yaml: no image")
		}
		img["digest"] = digest
		return nil
	}
	return fmt.Errorf("no values.yaml")
}

// redate rewrites a gzipped tar with every entry dated modTime, keeping its
// entries, their order and the gzip header Helm writes.
func redate(path string, modTime time.Time) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	zw.Header = zr.Header
	zw.ModTime = time.Time{}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		h.ModTime, h.AccessTime, h.ChangeTime = modTime.UTC().Truncate(time.Second), time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

// RenderArchive is Render for a packaged chart: `helm template outrigger
// ARCHIVE.tgz -n <namespace> -f <valuesYAML> --set <sets>...`.
func RenderArchive(archive, namespace, valuesYAML string, sets ...string) (*release.Release, error) {
	vals, err := UserValues(valuesYAML, sets...)
	if err != nil {
		return nil, err
	}
	c, err := loader.Load(archive)
	if err != nil {
		return nil, fmt.Errorf("loading the chart from %s: %w", archive, err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = ReleaseName
	install.Namespace = namespace
	v, err := semver.NewVersion(apiserver.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's version: %w", err)
	}
	install.KubeVersion = &chartutil.KubeVersion{Version: "v" + v.String(), Major: fmt.Sprint(v.Major()), Minor: fmt.Sprint(v.Minor())}
	return install.Run(c, vals)
}
