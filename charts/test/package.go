package charttest

import (
	"fmt"

	"github.com/Masterminds/semver/v3"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	"github.com/outrigger-ccm/outrigger/pkg/dev/apiserver"
)

// Package writes the chart in chartDir to outDir as
// <name>-<version>.tgz, as `helm package` does (Helm's loader, which
// honours .helmignore, then chartutil.Save), and returns the file's path.
// A non-empty version must be the chart's version and appVersion both.
func Package(chartDir, outDir, version string) (string, error) {
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
	return path, nil
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
