// Package providermain builds, for tests, a provider's own main.go that
// nobody here wrote: read from the Go module cache, its import of upstream's
// k8s.io/cloud-provider/app changed to Outrigger's app package and nothing
// else, in a module of its own that resolves every other module as the
// calling test's module does and Outrigger to this checkout.
package providermain

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The one line a provider's main changes.
const (
	UpstreamImport  = `"k8s.io/cloud-provider/app"`
	OutriggerImport = `"github.com/outrigger-ccm/outrigger/app"`
)

const outriggerModule = "github.com/outrigger-ccm/outrigger"

// Main is what to build.
type Main struct {
	// Module holds the main (k8s.io/cloud-provider-aws), File its path
	// in the module (cmd/aws-cloud-controller-manager/main.go).
	Module, File string
	// GoModDir is the directory of the module whose go.mod and go.sum the
	// build uses (the calling test's), which requires Module.
	GoModDir string
	// Name is the built module's path, which --version shows.
	Name string
	// Extra are more files of the main package, by name (what a provider
	// brings beside its main: a registered cloud, say).
	Extra map[string]string
}

// Build builds m and returns the binary's path, in a directory removed when
// the test ends.
func Build(t testing.TB, m Main) string {
	t.Helper()
	modDir := goOutput(t, m.GoModDir, "list", "-m", "-f", "{{.Dir}}", m.Module)
	src, err := os.ReadFile(filepath.Join(modDir, m.File))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), UpstreamImport); n != 1 {
		t.Fatalf("%s imports %s %d times, want once", m.File, UpstreamImport, n)
	}
	gomod, err := os.ReadFile(filepath.Join(m.GoModDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(m.GoModDir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"main.go": strings.Replace(string(src), UpstreamImport, OutriggerImport, 1),
		"go.mod":  goMod(t, string(gomod), m),
		"go.sum":  string(sum),
	}
	for name, text := range m.Extra {
		files[name] = text
	}
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, filepath.Base(m.Name))
	goOutput(t, dir, "build", "-mod=mod", "-o", bin, ".")
	return bin
}

var (
	moduleLine      = regexp.MustCompile(`(?m)^module \S+$`)
	relativeReplace = regexp.MustCompile(`=> (\.\.?/\S*)`)
)

// goMod is the calling module's go.mod under m.Name: its relative replace
// targets made absolute, and Outrigger, when the calling module is
// Outrigger itself, required and replaced by this checkout.
func goMod(t testing.TB, text string, m Main) string {
	t.Helper()
	self := moduleLine.FindString(text) == "module "+outriggerModule
	text = moduleLine.ReplaceAllString(text, "module "+m.Name)
	text = relativeReplace.ReplaceAllStringFunc(text, func(s string) string {
		rel := strings.TrimPrefix(s, "=> ")
		abs, err := filepath.Abs(filepath.Join(m.GoModDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		return "=> " + abs
	})
	if self {
		root, err := filepath.Abs(m.GoModDir)
		if err != nil {
			t.Fatal(err)
		}
		text += "\nrequire " + outriggerModule + " v0.0.0\n\nreplace " + outriggerModule + " => " + root + "\n"
	}
	return text
}

func goOutput(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Run starts the binary with args until the test ends; its output goes to a
// log file, whose last 8,000 bytes the test prints when it fails.
func Run(t testing.TB, bin string, args ...string) {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), filepath.Base(bin)+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s's log (last 8000 bytes):\n%s", filepath.Base(bin), b)
		}
	})
}
