// Package tools_test runs the shell tools the Makefile runs its steps
// through over fake steps: tools/progress.sh, which says what a long step
// of `make dev` does and how far it is, its output in a log, and
// tools/steptimes.sh's start and end lines of `make test`'s steps.
package tools_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// progress returns tools/progress.sh run in mode (plain or tty) with
// prefix "make dev", over a fake step given as shell; its log is LOG.
func progress(t *testing.T, mode, log string, args ...string) *exec.Cmd {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(root, "tools/progress.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{script, "-p", "make dev"}, args...)...)
	cmd.Dir = filepath.Dir(log)
	cmd.Env = append(os.Environ(), "PROGRESS="+mode, "PROGRESS_EVERY=1")
	return cmd
}

// A step that succeeds: a line when it starts, one when it ends with its
// time and what its log counted (packages compiled, modules downloaded,
// never the downloads themselves), and its output in the log.
func TestProgressOfAStepThatSucceeds(t *testing.T) {
	log := filepath.Join(t.TempDir(), "build.log")
	step := `echo "go: downloading example.com/a v1.0.0"; echo "go: downloading example.com/b v1.2.0"
		echo internal/abi; echo example.com/a/pkg; echo example.com/b`
	out, err := progress(t, "plain", log, "-u", "packages compiled", "-n", "5", log, "building a fake", "sh", "-c", step).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := regexp.MustCompile(`^make dev: building a fake \.\.\.
make dev: building a fake: done in [0-9]+ s, 3 packages compiled, 2 modules downloaded
$`)
	if !want.Match(out) {
		t.Errorf("output:\n%s\nwant it to match\n%s", out, want)
	}
	if got, _ := os.ReadFile(log); !bytes.Contains(got, []byte("go: downloading example.com/b v1.2.0\ninternal/abi\n")) {
		t.Errorf("the log %s holds\n%s\nwant the step's output", log, got)
	}
}

// A step that fails: the last 25 lines of its log, then the log's path,
// and its exit status.
func TestProgressOfAStepThatFails(t *testing.T) {
	log := filepath.Join(t.TempDir(), "controlplane.log")
	step := `for i in $(seq 1 40); do echo "line $i"; done; echo "x.go:1:2: undefined: y" >&2; exit 3`
	out, err := progress(t, "plain", log, log, "compiling a fake", "sh", "-c", step).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("exit %v, want status 3\n%s", err, out)
	}
	var tail strings.Builder
	for i := 17; i <= 40; i++ {
		fmt.Fprintf(&tail, "    line %d\n", i)
	}
	want := regexp.MustCompile(`^make dev: compiling a fake \.\.\.
make dev: compiling a fake: failed \(exit 3\) after [0-9]+ s; the last 25 lines of ` + regexp.QuoteMeta(log) + `:
` + regexp.QuoteMeta(tail.String()) + `    x\.go:1:2: undefined: y
make dev: compiling a fake: failed; its whole log is ` + regexp.QuoteMeta(log) + `
$`)
	if !want.Match(out) {
		t.Errorf("output:\n%s\nwant it to match\n%s", out, want)
	}
}

// While a step runs, a line says how far it is: in a pipe a plain line
// every PROGRESS_EVERY seconds, on a terminal one line rewritten in place
// (a carriage return and erase to the end of the line before each). The
// step runs until the test has seen such a line.
func TestProgressWhileAStepRuns(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// line matches a progress line (up to its end in plain mode).
		line *regexp.Regexp
		sep  byte
	}{
		{"plain", regexp.MustCompile(`^make dev: compiling a fake: [0-9]+ s, 1 of 9 packages compiled, 1 module downloaded\n$`), '\n'},
		{"tty", regexp.MustCompile(`^make dev: compiling a fake: [0-9]+ s, 1 of 9 packages compiled, 1 module downloaded\r$`), '\r'},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			dir := t.TempDir()
			log, done := filepath.Join(dir, "step.log"), filepath.Join(dir, "done")
			step := `echo "go: downloading example.com/a v1.0.0"; echo example.com/a; while [ ! -e "$0" ]; do sleep 0.05; done`
			cmd := progress(t, tc.mode, log, "-u", "packages compiled", "-n", "9", log, "compiling a fake", "sh", "-c", step, done)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			r := bufio.NewReader(stdout)
			var seen []string
			deadline := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
			defer deadline.Stop()
			for {
				chunk, err := r.ReadString(tc.sep)
				seen = append(seen, chunk)
				if tc.line.MatchString(strings.TrimPrefix(chunk, "\033[K")) {
					break
				}
				if err != nil {
					t.Fatalf("no progress line matching %s in\n%q", tc.line, seen)
				}
			}
			if err := os.WriteFile(done, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			rest, _ := bufio.NewReader(r).ReadString(0)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v; output %q", err, append(seen, rest))
			}
			// The end line starts where the progress line was, in tty mode erased first.
			end := regexp.MustCompile(`make dev: compiling a fake: done in [0-9]+ s, 1 packages compiled, 1 module downloaded\n$`)
			if !end.MatchString(rest) || (tc.mode == "tty" && !strings.Contains(rest, "\r\033[Kmake dev: compiling a fake: done")) {
				t.Errorf("after the progress lines %q, want the end line, got %q", seen, rest)
			}
		})
	}
}

// make test's steps: a line when each starts and one when it ends, with
// its result and time, before the table of all of them.
func TestStepTimesStartAndEndLines(t *testing.T) {
	dir := t.TempDir()
	script := fmt.Sprintf(`. %q; steps_begin %q; step 'a fake step' echo output; step 'a failing step' false || true`,
		mustAbs(t, filepath.Join(root, "tools/steptimes.sh")), filepath.Join(dir, "steps.tsv"))
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := regexp.MustCompile(`^make test: a fake step \.\.\.
\+ echo output
output
make test: a fake step: passed in 0 min [0-9]+ s
make test: a failing step \.\.\.
\+ false
make test: a failing step: failed \(exit 1\) in 0 min [0-9]+ s

make test: time of each step
`)
	if !want.Match(out) {
		t.Errorf("output:\n%s\nwant it to start with\n%s", out, want)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
