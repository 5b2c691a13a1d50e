// Package version is Outrigger's one version: --version prints it, the
// image is tagged with it (make image, make release), and the Helm chart's
// version and appVersion are it (a test checks). Outrigger is v0: flags,
// Events, metrics and the plugin protocol that match upstream's stay as they
// are; Outrigger's own flags, metrics and the pkg/provider and pkg/plugin Go
// APIs may still change between minor versions (CHANGELOG.md says how).
package version

// Version is Outrigger's version, semantic, without a leading v.
const Version = "0.3.0"
