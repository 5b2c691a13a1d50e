package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run runs a command in dir and returns its combined output.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// gitIdentity lets commits be made where git has no identity configured.
var gitIdentity = []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}

// Tagging a release: only a clean tree, only a version the CHANGELOG names,
// the same tag object when repeated, and never a tag moved to another commit.
func TestTag(t *testing.T) {
	repo := t.TempDir()
	mustRun(t, repo, nil, "git", "init", "-q")
	commit := func(changelog string) string {
		if err := os.WriteFile(filepath.Join(repo, "CHANGELOG.md"), []byte(changelog), 0o644); err != nil {
			t.Fatal(err)
		}
		mustRun(t, repo, nil, "git", "add", "CHANGELOG.md")
		mustRun(t, repo, gitIdentity, "git", "commit", "-q", "-m", "c")
		return mustRun(t, repo, nil, "git", "rev-parse", "HEAD")
	}
	ctx := context.Background()
	commit("# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-11-01\n")
	if err := tag(ctx, tagOptions{Repo: repo, Version: "0.3.0"}); err == nil || !strings.Contains(err.Error(), "no section") {
		t.Errorf("a version the CHANGELOG does not name: %v, want refused", err)
	}
	first := commit("# Changelog\n\n## [0.3.0] - 2026-11-28\n\n## [0.2.0] - 2026-11-01\n")
	if err := os.WriteFile(filepath.Join(repo, "CHANGELOG.md"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tag(ctx, tagOptions{Repo: repo, Version: "0.3.0"}); err == nil || !strings.Contains(err.Error(), "uncommitted") {
		t.Errorf("a tree with uncommitted changes: %v, want refused", err)
	}
	mustRun(t, repo, nil, "git", "checkout", "-q", "CHANGELOG.md")
	if err := tag(ctx, tagOptions{Repo: repo, Version: "0.3.0"}); err != nil {
		t.Fatal(err)
	}
	obj := mustRun(t, repo, nil, "git", "rev-parse", "v0.3.0")
	if got := mustRun(t, repo, nil, "git", "rev-parse", "v0.3.0^{commit}"); got != first {
		t.Errorf("v0.3.0 names %s, want HEAD %s", got, first)
	}
	if typ := mustRun(t, repo, nil, "git", "cat-file", "-t", "v0.3.0"); typ != "tag" {
		t.Errorf("v0.3.0 is a %s, want an annotated tag", typ)
	}
	if err := tag(ctx, tagOptions{Repo: repo, Version: "0.3.0"}); err != nil {
		t.Errorf("tagging the same commit again: %v", err)
	}
	if again := mustRun(t, repo, nil, "git", "rev-parse", "v0.3.0"); again != obj {
		t.Errorf("the tag object changed from %s to %s", obj, again)
	}
	commit("# Changelog\n\n## [0.3.0] - 2026-11-28\n\nmore\n")
	if err := tag(ctx, tagOptions{Repo: repo, Version: "0.3.0"}); err == nil || !strings.Contains(err.Error(), "already names") {
		t.Errorf("moving v0.3.0 to another commit: %v, want refused", err)
	}
}

// A provider's module requires a tagged Outrigger the way go get resolves
// it from its repository: this repository's HEAD, tagged, is fetched by git
// (GOPRIVATE: no proxy, no checksum database) from a clone standing in for
// github.com/outrigger-ccm/outrigger. The supported packages resolve; an
// internal one is refused to the provider's module.
func TestGoGetTaggedRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches the module")
	}
	clone := filepath.Join(t.TempDir(), "outrigger")
	mustRun(t, "", nil, "git", "clone", "-q", "--no-local", repo, clone)
	// A version of its own, so that the module cache never holds another
	// commit under a real release's version; removed from the cache after.
	version := fmt.Sprintf("v0.0.0-gotest.%d", time.Now().UnixNano())
	mustRun(t, clone, gitIdentity, "git", "tag", "-a", "-m", "test", version)
	modcache := mustRun(t, "", nil, "go", "env", "GOMODCACHE")
	t.Cleanup(func() {
		dir := filepath.Join(modcache, "github.com", "outrigger-ccm", "outrigger@"+version)
		_ = exec.Command("chmod", "-R", "u+w", dir).Run()
		_ = os.RemoveAll(dir)
		dl, _ := filepath.Glob(filepath.Join(modcache, "cache", "download", "github.com", "outrigger-ccm", "outrigger", "@v", version+".*"))
		for _, f := range dl {
			_ = os.Remove(f)
		}
	})
	gitconfig := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(gitconfig, []byte(fmt.Sprintf("[url \"file://%s\"]\n\tinsteadOf = https://github.com/outrigger-ccm/outrigger\n", clone)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"GIT_CONFIG_GLOBAL=" + gitconfig, "GIT_CONFIG_NOSYSTEM=1", "GOPRIVATE=github.com/outrigger-ccm/outrigger", "GOFLAGS=-mod=mod", "GOWORK=off"}

	mod := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/mycloud\n\ngo 1.26.0\n",
		"main.go": `package main

import (
	"os"

	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func main() { os.Exit(manager.Main(provider.NewRegistry())) }
`,
		"own/own.go": `package own

import _ "github.com/outrigger-ccm/outrigger/internal/cloud"
`,
	}
	for name, body := range files {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(t, mod, env, "go", "get", "github.com/outrigger-ccm/outrigger@"+version)
	if gomod, _ := os.ReadFile(filepath.Join(mod, "go.mod")); !strings.Contains(string(gomod), "github.com/outrigger-ccm/outrigger "+version) {
		t.Errorf("go.mod after go get:\n%s", gomod)
	}
	mustRun(t, mod, env, "go", "list", "-deps", ".")
	out, err := run(t, mod, env, "go", "list", "./own")
	if err == nil || !strings.Contains(out, "use of internal package github.com/outrigger-ccm/outrigger/internal/cloud not allowed") {
		t.Errorf("a provider importing internal/cloud: %v\n%s\nwant refused", err, out)
	}
}
