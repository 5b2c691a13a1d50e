// Package docs_test checks that the commands the docs show exist: every
// `make` target in README.md and docs/*.md is a rule of the Makefile, and
// every `outrigger` subcommand and flag is one of the command the binary
// builds, as is every flag in docs/flags.md's tables. Flags of other
// programs (kubectl, helm, go, curl, ...) are not checked.
package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/outrigger-ccm/outrigger/internal/console"
	"github.com/outrigger-ccm/outrigger/internal/dev"
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcli"
	"github.com/outrigger-ccm/outrigger/pkg/conformance"
	"github.com/outrigger-ccm/outrigger/pkg/manager"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

// root is the repository's top directory, from this package's.
const root = "../.."

// subcommandPackages are the packages whose NewCommand cmd/outrigger adds
// to the outrigger command; outriggerCommand builds the same tree.
var subcommandPackages = []string{
	"github.com/outrigger-ccm/outrigger/internal/console",
	"github.com/outrigger-ccm/outrigger/internal/dev",
	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane",
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcli",
	"github.com/outrigger-ccm/outrigger/pkg/conformance",
}

// outriggerCommand is the command cmd/outrigger runs (its development
// build, with `dev`), with cobra's help command and flags added as
// Execute adds them.
func outriggerCommand() *cobra.Command {
	reg := provider.NewRegistry()
	cmd := manager.NewCommand(reg, dev.NewCommand(), simcli.NewCommand(), conformance.NewCommand(reg), console.NewCommand(), dataplane.NewCommand())
	cmd.InitDefaultHelpCmd()
	var initHelp func(*cobra.Command)
	initHelp = func(c *cobra.Command) {
		c.InitDefaultHelpFlag()
		for _, s := range c.Commands() {
			initHelp(s)
		}
	}
	initHelp(cmd)
	return cmd
}

// TestCommandTreeIsTheBinarys checks that outriggerCommand adds the
// subcommands cmd/outrigger adds: each package whose NewCommand its files
// call.
func TestCommandTreeIsTheBinarys(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob(filepath.Join(root, "cmd/outrigger/*.go"))
	if err != nil || len(pkgs) == 0 {
		t.Fatalf("cmd/outrigger: %v", err)
	}
	var called []string
	for _, file := range pkgs {
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]string{}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := filepath.Base(p)
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = p
		}
		f, err = parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewCommand" {
				if x, ok := sel.X.(*ast.Ident); ok && imports[x.Name] != "" && x.Name != "manager" {
					called = append(called, imports[x.Name])
				}
			}
			return true
		})
	}
	slices.Sort(called)
	called = slices.Compact(called)
	if !slices.Equal(called, subcommandPackages) {
		t.Errorf("cmd/outrigger adds the subcommands of%s\nthis test builds those of%s\nupdate outriggerCommand and subcommandPackages", lines(called), lines(subcommandPackages))
	}
}

// makeTargets reads the Makefile's rules: every name before a colon that
// does not start a recipe or assign a variable.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if l == "" || l[0] == '\t' || l[0] == '#' || l[0] == ' ' {
			continue
		}
		before, _, ok := strings.Cut(l, ":")
		if !ok || strings.ContainsAny(before, "=") || strings.HasPrefix(l[len(before):], ":=") {
			continue
		}
		for _, name := range strings.Fields(before) {
			if !strings.HasPrefix(name, ".") {
				targets[name] = true
			}
		}
	}
	if len(targets) < 5 {
		t.Fatalf("found only %v in the Makefile", targets)
	}
	return targets
}

// A snippet is code from a doc: a code span, or a line of a code block.
type snippet struct {
	file string
	line int
	text string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d: %s", s.file, s.line, s.text) }

var codeSpan = regexp.MustCompile("(`+)([^`]+?)`+")

// commands returns the shell a markdown text shows: code spans outside
// code blocks; in console blocks the lines after a `$ ` prompt; every line
// of sh and bash blocks and of blocks that name no language. Blocks of
// other languages (go, yaml, ...) are not shell.
func commands(file, text string) []snippet {
	var out []snippet
	inBlock, shell := false, false
	lang := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~") {
			if !inBlock {
				lang = strings.TrimSpace(strings.Trim(l, "`~"))
				shell = slices.Contains([]string{"", "console", "sh", "bash", "shell", "shell-session"}, lang)
			}
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			for _, m := range codeSpan.FindAllStringSubmatch(lines[i], -1) {
				out = append(out, snippet{file, i + 1, strings.TrimPrefix(strings.TrimSpace(m[2]), "$ ")})
			}
			continue
		}
		if !shell {
			continue
		}
		start := i
		if lang == "console" || lang == "shell-session" {
			cmd, ok := strings.CutPrefix(l, "$ ")
			if !ok {
				continue
			}
			l = cmd
		} else {
			l = strings.TrimPrefix(l, "$ ")
		}
		// Continuation lines.
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, snippet{file, start + 1, l})
	}
	return out
}

// checker holds what the docs are checked against.
type checker struct {
	targets   map[string]bool
	outrigger *cobra.Command
}

// check returns what is wrong with one snippet's commands.
func (c checker) check(s snippet) []string {
	var problems []string
	for _, cmd := range simpleCommands(s.text) {
		words := program(cmd)
		if len(words) == 0 {
			continue
		}
		switch {
		case words[0] == "make":
			problems = append(problems, c.checkMake(words[1:])...)
		case isOutrigger(words[0]):
			problems = append(problems, c.checkOutrigger(words[1:])...)
		case words[0] == "go" && len(words) > 2 && words[1] == "run":
			for i, w := range words[2:] {
				if strings.HasSuffix(w, "cmd/outrigger") {
					problems = append(problems, c.checkOutrigger(words[2+i+1:])...)
					break
				}
			}
		}
	}
	return problems
}

// isOutrigger: the binary, by name or path (./bin/outrigger,
// /usr/local/bin/outrigger), not a directory such as charts/outrigger.
func isOutrigger(w string) bool { return w == "outrigger" || strings.HasSuffix(w, "bin/outrigger") }

// make's options that take the next word.
var makeOptionArgs = []string{"-C", "-f", "-I", "-o", "-W", "-j"}

func (c checker) checkMake(args []string) []string {
	var problems []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case slices.Contains(makeOptionArgs, a):
			i++
		case strings.HasPrefix(a, "-"), isAssignment(a):
		case !c.targets[a]:
			problems = append(problems, fmt.Sprintf("make %s: no such target in the Makefile", a))
		}
	}
	return problems
}

func (c checker) checkOutrigger(args []string) []string {
	var problems []string
	cmd := c.outrigger
	descend := true
	for _, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			if p := checkFlag(cmd, a); p != "" {
				problems = append(problems, p)
			}
			// After a flag, bare words are its value or arguments.
			descend = false
			continue
		}
		if !descend {
			continue
		}
		if sub := subcommand(cmd, a); sub != nil {
			cmd = sub
			continue
		}
		if cmd.HasSubCommands() {
			problems = append(problems, fmt.Sprintf("%s %s: no such subcommand (it has %s)", cmd.CommandPath(), a, strings.Join(subcommandNames(cmd), ", ")))
		}
		descend = false
	}
	return problems
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, s := range cmd.Commands() {
		if s.Name() == name || s.HasAlias(name) {
			return s
		}
	}
	return nil
}

func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, s := range cmd.Commands() {
		names = append(names, s.Name())
	}
	return names
}

// checkFlag says what is wrong with a flag word (--name, --name=value, -x)
// given to cmd: nothing when cmd or a parent (persistent flags) has it.
func checkFlag(cmd *cobra.Command, word string) string {
	name, _, _ := strings.Cut(word, "=")
	if long, ok := strings.CutPrefix(name, "--"); ok {
		if lookup(cmd, long) {
			return ""
		}
		return fmt.Sprintf("%s %s: no such flag", cmd.CommandPath(), name)
	}
	short := strings.TrimPrefix(name, "-")
	for _, r := range short {
		if !lookupShort(cmd, string(r)) {
			return fmt.Sprintf("%s %s: no such flag", cmd.CommandPath(), name)
		}
	}
	return ""
}

func lookup(cmd *cobra.Command, name string) bool {
	return cmd.Flags().Lookup(name) != nil || cmd.PersistentFlags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil
}

func lookupShort(cmd *cobra.Command, name string) bool {
	return cmd.Flags().ShorthandLookup(name) != nil || cmd.PersistentFlags().ShorthandLookup(name) != nil || cmd.InheritedFlags().ShorthandLookup(name) != nil
}

// flagsTableRow is a row of docs/flags.md's tables: | `--name` | type | ...
var flagsTableRow = regexp.MustCompile("^\\| `(--[^`= ]+)[^`]*` \\|")

// docFiles are the docs checked: README.md and docs/*.md, not CHANGELOG.md
// (it records what was, including what is gone).
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

// problems checks one doc's text.
func (c checker) problems(file, text string) []string {
	var out []string
	for _, s := range commands(file, text) {
		for _, p := range c.check(s) {
			out = append(out, fmt.Sprintf("%s\n      %s", s, p))
		}
	}
	if filepath.Base(file) == "flags.md" {
		for i, l := range strings.Split(text, "\n") {
			if m := flagsTableRow.FindStringSubmatch(l); m != nil && !lookup(c.outrigger, strings.TrimPrefix(m[1], "--")) {
				out = append(out, fmt.Sprintf("%s:%d: %s\n      outrigger %s: no such flag", file, i+1, l, m[1]))
			}
		}
	}
	return out
}

func newChecker(t *testing.T) checker {
	return checker{targets: makeTargets(t), outrigger: outriggerCommand()}
}

// TestDocsNameWhatExists checks README.md and docs/*.md.
func TestDocsNameWhatExists(t *testing.T) {
	c := newChecker(t)
	var all []string
	checked := 0
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, s := range commands(rel, string(raw)) {
			for _, cmd := range simpleCommands(s.text) {
				if w := program(cmd); len(w) > 0 && (w[0] == "make" || isOutrigger(w[0])) {
					checked++
				}
			}
		}
		all = append(all, c.problems(rel, string(raw))...)
	}
	if checked < 50 {
		t.Errorf("found only %d make and outrigger commands in the docs: is the scan broken?", checked)
	}
	if len(all) > 0 {
		t.Errorf("the docs name make targets, outrigger subcommands or flags that do not exist:\n%s", strings.Join(all, "\n"))
	}
}

// TestCheckerFindsMistakes checks the checker on a doc with a mistake of
// each kind, and with other programs' flags it must leave alone.
func TestCheckerFindsMistakes(t *testing.T) {
	c := newChecker(t)
	doc := "Run `make tset` or `make test FUZZTIME=1s`, then `outrigger devv`.\n" +
		"Flags of others: `kubectl get nodes --show-labels`, `helm install x --set a=b`, `--no-such-flag`.\n" +
		"```console\n" +
		"$ ./bin/outrigger --cloud-provider=sim --no-such-thing 2>&1 | grep -c --count x\n" +
		"output: outrigger --not-a-command\n" +
		"$ sudo make cluster-test && ./bin/outrigger dev --nodes 3 --bogus &\n" +
		"$ OUTRIGGER_ASSETS=/tmp/x go run ./cmd/outrigger sim serve --listen 127.0.0.1:1 --nope \\\n" +
		"    --instances 2\n" +
		"$ kubectl logs deploy/outrigger --tail=20   # outrigger --in-a-comment\n" +
		"$ outrigger conformance --endpoint unix:///tmp/p.sock --node a --node b\n" +
		"$ outrigger sim create node-4\n" +
		"$ helm template outrigger ./charts/outrigger --set a=b && ls charts/outrigger --long\n" +
		"$ make bin/outrigger-ccm bin/nothing\n" +
		"```\n" +
		"```yaml\n" +
		"args: [outrigger --ignored-in-yaml]\n" +
		"```\n"
	got := c.problems("doc.md", doc)
	want := []string{
		"doc.md:1: make tset\n      make tset: no such target in the Makefile",
		"doc.md:1: outrigger devv\n      outrigger devv: no such subcommand",
		"doc.md:4: ./bin/outrigger --cloud-provider=sim --no-such-thing 2>&1 | grep -c --count x\n      outrigger --no-such-thing: no such flag",
		"doc.md:6: sudo make cluster-test && ./bin/outrigger dev --nodes 3 --bogus &\n      outrigger dev --bogus: no such flag",
		"outrigger sim serve --nope: no such flag",
		"doc.md:13: make bin/outrigger-ccm bin/nothing\n      make bin/nothing: no such target in the Makefile",
	}
	all := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("problems lack %q; got:\n%s", w, all)
		}
	}
	if len(got) != 6 {
		t.Errorf("%d problems, want 6 (one for each mistake, none for other programs):\n%s", len(got), all)
	}

	flags := "| `--cloud-provider` | string | | |\n| `--cloud-providerr` | string | | |\n"
	if got := c.problems("docs/flags.md", flags); len(got) != 1 || !strings.Contains(got[0], "--cloud-providerr: no such flag") {
		t.Errorf("flags.md table problems %q, want one for --cloud-providerr", got)
	}
}

func lines(ss []string) string { return "\n  " + strings.Join(ss, "\n  ") }
