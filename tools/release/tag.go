package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// tagOptions say what to tag: the release's version (without the v) and the
// repository whose HEAD is the release commit.
type tagOptions struct {
	Repo    string
	Version string
}

// tag marks HEAD of the repository as the release v<Version>, the tag Go's
// module tooling resolves `go get github.com/outrigger-ccm/outrigger@v<Version>`
// to. It refuses a tree with uncommitted changes (the release would not be
// the commit), a version the CHANGELOG has no section for, and a tag that
// already names another commit; the same tag on the same commit is kept.
// The tag is annotated, dated with the commit's time so that tagging the
// same commit twice gives the same tag object.
func tag(ctx context.Context, o tagOptions) error {
	git := func(env []string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", o.Repo}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	name := "v" + o.Version
	head, err := git(nil, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if dirty, err := git(nil, "status", "--porcelain", "--untracked-files=no"); err != nil {
		return err
	} else if dirty != "" {
		return fmt.Errorf("uncommitted changes; a release is a commit:\n%s", dirty)
	}
	changelog, err := git(nil, "show", "HEAD:CHANGELOG.md")
	if err != nil {
		return err
	}
	if !strings.Contains("\n"+changelog, "\n## ["+o.Version+"]") {
		return fmt.Errorf("CHANGELOG.md has no section %q: name the release's changes before tagging it", "## ["+o.Version+"]")
	}
	if tagged, err := git(nil, "rev-parse", "-q", "--verify", name+"^{commit}"); err == nil {
		if tagged != head {
			return fmt.Errorf("tag %s already names commit %s, not HEAD %s", name, tagged, head)
		}
		fmt.Printf("release: %s already names %s\n", name, head)
		return nil
	}
	date, err := git(nil, "log", "-1", "--format=%cI", "HEAD")
	if err != nil {
		return err
	}
	// A machine without a git identity (CI) still tags: the tagger is the
	// release tool, as the signatures are the release key's.
	env := []string{"GIT_COMMITTER_DATE=" + date}
	if id, _ := git(nil, "config", "user.email"); id == "" {
		env = append(env, "GIT_COMMITTER_NAME=Outrigger release", "GIT_COMMITTER_EMAIL=release@outrigger.invalid")
	}
	if _, err := git(env, "tag", "-a", "-m", "Outrigger "+name, name, head); err != nil {
		return err
	}
	fmt.Printf("release: tagged %s as %s\n", head, name)
	return nil
}
