package manager

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/component-base/version"

	outrigger "github.com/outrigger-ccm/outrigger/internal/version"
)

// versionFlag is upstream's --version: --version prints the version,
// --version=raw the full build information. Its flag type is "version", as
// upstream's.
type versionFlag string

func (v *versionFlag) String() string {
	if *v == "" {
		return "false"
	}
	return string(*v)
}

func (v *versionFlag) Type() string     { return "version" }
func (v *versionFlag) IsBoolFlag() bool { return true }

func (v *versionFlag) Set(s string) error {
	if s == "raw" {
		*v = "raw"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or raw: %w", err)
	}
	*v = versionFlag(strconv.FormatBool(b))
	return nil
}

// requested reports whether --version was given.
func (v versionFlag) requested() bool { return v == "true" || v == "raw" }

// print writes Outrigger's version and the Kubernetes libraries it was built
// with; raw adds every module of the build.
func (v versionFlag) print(w io.Writer) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(w, "Outrigger (no build information)")
		return
	}
	// A provider's own binary (package app) names itself first.
	if info.Main.Path != "" && info.Main.Path != outriggerModule {
		fmt.Fprintf(w, "%s %s\n", info.Main.Path, info.Main.Version)
	}
	fmt.Fprintf(w, "Outrigger %s\n", outriggerVersion(info))
	fmt.Fprintf(w, "Kubernetes component version %s\n", version.Get().GitVersion)
	fmt.Fprintf(w, "Go %s\n", info.GoVersion)
	for _, dep := range info.Deps {
		raw := v == "raw"
		if raw || strings.HasPrefix(dep.Path, "k8s.io/") || strings.HasPrefix(dep.Path, "sigs.k8s.io/controller-runtime") {
			if dep.Replace != nil {
				dep = dep.Replace
			}
			fmt.Fprintf(w, "  %s %s\n", dep.Path, dep.Version)
		}
	}
}

const outriggerModule = "github.com/outrigger-ccm/outrigger"

// outriggerVersion is Outrigger's version (internal/version) and, when built
// from a checkout, the commit.
func outriggerVersion(info *debug.BuildInfo) string {
	if c := commit(info); c != "" {
		return "v" + outrigger.Version + " (" + c + ")"
	}
	return "v" + outrigger.Version
}

// commit is the commit a build from a checkout was made from, or "".
func commit(info *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev == "" {
		return ""
	}
	return "commit " + rev[:min(12, len(rev))] + modified
}
