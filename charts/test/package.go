package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/action"
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
	c, err := loader.Load(chartDir)
	if err != nil {
		return "", fmt.Errorf("loading the chart from %s: %w", chartDir, err)
	}
	if version != "" && (c.Metadata.Version != version || c.Metadata.AppVersion != version) {
		return "", fmt.Errorf("%s: version %q, appVersion %q, want both %q", chartDir, c.Metadata.Version, c.Metadata.AppVersion, version)
	}
	path, err := chartutil.Save(c, outDir)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	if err := redate(path, modTime); err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	return path, nil
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
