package e2e

import (
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The JUnit XML the e2e framework writes (junit_01.xml, by ginkgo's
// reporter): only what the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *junitFailure `xml:"failure"`
	Error   *junitFailure `xml:"error"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// Result is one test's outcome.
type Result struct {
	// Name is the test's full name, without ginkgo's "[It] " prefix.
	Name string
	// Status is passed, failed or skipped; a timed-out, interrupted,
	// aborted or panicked test is failed, with that in Reason.
	Status string
	Reason string
	Time   time.Duration
}

// Summarize reads a JUnit report and returns the tests that match focus,
// and any suite-level node (BeforeSuite and the like) that did not pass:
// a failure there fails every test. The report lists every test of the
// suite, most of them skipped for not matching the focus; a focused test
// skipped without a message of its own was left out by --ginkgo.skip, and
// its reason is its exclusion's.
func Summarize(r io.Reader, focus *regexp.Regexp, excluded []Exclusion) ([]Result, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("parsing the JUnit report: %w", err)
	}
	var res []Result
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			name, isIt := strings.CutPrefix(c.Name, "[It] ")
			if isIt && !focus.MatchString(name) {
				continue
			}
			if !isIt && (c.Status == "passed" || c.Status == "skipped") {
				continue
			}
			out := Result{Name: name, Status: c.Status, Time: time.Duration(c.Time * float64(time.Second))}
			switch {
			case c.Status == "passed":
			case c.Skipped != nil:
				out.Status = "skipped"
				msg, own := strings.CutPrefix(c.Skipped.Message, "skipped - ")
				if own {
					out.Reason = oneLine(msg)
					break
				}
				out.Reason = "left out by --ginkgo.skip"
				for _, e := range excluded {
					if regexp.MustCompile(e.Pattern).MatchString(name) {
						out.Reason = e.Reason
						break
					}
				}
			default:
				out.Status = "failed"
				f := c.Failure
				if f == nil {
					f = c.Error
				}
				if f != nil {
					out.Reason = failureReason(f)
				}
			}
			res = append(res, out)
		}
	}
	return res, nil
}

// where finds ginkgo's "In [It] at: /path/file.go:123" line.
var where = regexp.MustCompile(`In \[[A-Za-z]+\] at: (\S+):(\d+)`)

// failureReason is the failure's message on one line, with the file:line
// of the e2e source it failed at.
func failureReason(f *junitFailure) string {
	text := f.Message
	if text == "" {
		text = f.Text
	}
	msg := text
	if i := strings.Index(msg, "\nIn ["); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimPrefix(strings.TrimSpace(msg), "[FAILED] ")
	msg = strings.TrimPrefix(msg, "[TIMEDOUT] ")
	msg = oneLine(msg)
	if f.Type != "" && f.Type != "failed" {
		msg = f.Type + ": " + msg
	}
	if m := where.FindStringSubmatch(f.Text); m != nil {
		msg += " (" + e2eSourcePath(m[1]) + ":" + m[2] + ")"
	}
	return msg
}

// e2eSourcePath shortens a path in the module cache to its part under
// k8s.io/kubernetes, e.g. test/e2e/network/loadbalancer.go.
func e2eSourcePath(p string) string {
	if i := strings.Index(p, "/test/e2e/"); i >= 0 {
		return p[i+1:]
	}
	return filepath.Base(p)
}

// oneLine squashes whitespace and cuts long text: a table cell.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	const max = 400
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// Markdown renders results as the table docs/e2e.md holds, with totals.
func Markdown(results []Result) string {
	var b strings.Builder
	counts := map[string]int{}
	b.WriteString("| result | test | time | reason |\n| --- | --- | --- | --- |\n")
	for _, r := range results {
		counts[r.Status]++
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Status, cell(r.Name), r.Time.Round(time.Second), cell(r.Reason))
	}
	fmt.Fprintf(&b, "\n%d passed, %d failed, %d skipped.\n", counts["passed"], counts["failed"], counts["skipped"])
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Run is what one run of the suite leaves for the record: the JUnit summary
// that docs/e2e/ holds, with each test's name, result and duration, and no
// log.
type Run struct {
	// Name names the selection, e.g. "fast" or "full".
	Name string
	// Kubernetes is the version e2e.test and the cluster were built from.
	Kubernetes string
	// Commit is Outrigger's commit the run tested ("-dirty" when the work
	// tree had changes).
	Commit string
	// Command is what was run; Focus and Skip are the regular expressions
	// that selected the tests (--ginkgo.focus and --ginkgo.skip).
	Command     string
	Focus, Skip string
	// Started is when e2e.test started; Elapsed is how long it ran.
	Started time.Time
	Elapsed time.Duration
	Results []Result
}

// The summary's JUnit form: the elements and attributes JUnit readers
// (CI report viewers) know, properties for the rest.
type summarySuites struct {
	XMLName  xml.Name       `xml:"testsuites"`
	Name     string         `xml:"name,attr"`
	Tests    int            `xml:"tests,attr"`
	Failures int            `xml:"failures,attr"`
	Skipped  int            `xml:"skipped,attr"`
	Time     string         `xml:"time,attr"`
	Suites   []summarySuite `xml:"testsuite"`
}

type summarySuite struct {
	Name       string            `xml:"name,attr"`
	Tests      int               `xml:"tests,attr"`
	Failures   int               `xml:"failures,attr"`
	Skipped    int               `xml:"skipped,attr"`
	Time       string            `xml:"time,attr"`
	Timestamp  string            `xml:"timestamp,attr"`
	Properties []summaryProperty `xml:"properties>property"`
	Cases      []summaryCase     `xml:"testcase"`
}

type summaryProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type summaryCase struct {
	Name      string          `xml:"name,attr"`
	ClassName string          `xml:"classname,attr"`
	Time      string          `xml:"time,attr"`
	Failure   *summaryMessage `xml:"failure"`
	Skipped   *summaryMessage `xml:"skipped"`
}

type summaryMessage struct {
	Message string `xml:"message,attr"`
}

// The suite's name in the summary, as the framework's own report names it.
const suiteName = "Kubernetes e2e suite"

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes run as a JUnit XML summary.
func WriteJUnit(w io.Writer, run Run) error {
	s := summarySuite{
		Name:      suiteName,
		Time:      seconds(run.Elapsed),
		Timestamp: run.Started.UTC().Format(time.RFC3339),
		Properties: []summaryProperty{
			{Name: "selection", Value: run.Name},
			{Name: "kubernetes", Value: run.Kubernetes},
			{Name: "outrigger-commit", Value: run.Commit},
			{Name: "command", Value: run.Command},
			{Name: "focus", Value: run.Focus},
			{Name: "skip", Value: run.Skip},
		},
	}
	for _, r := range run.Results {
		c := summaryCase{Name: r.Name, ClassName: suiteName, Time: seconds(r.Time)}
		switch r.Status {
		case "passed":
		case "skipped":
			c.Skipped = &summaryMessage{Message: r.Reason}
			s.Skipped++
		default:
			c.Failure = &summaryMessage{Message: r.Reason}
			s.Failures++
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
	}
	doc := summarySuites{Name: suiteName + " " + run.Kubernetes + ", " + run.Name, Tests: s.Tests,
		Failures: s.Failures, Skipped: s.Skipped, Time: s.Time, Suites: []summarySuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("writing the JUnit summary: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// ReadJUnit reads a summary that WriteJUnit wrote.
func ReadJUnit(r io.Reader) (Run, error) {
	var doc summarySuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return Run{}, fmt.Errorf("parsing the JUnit summary: %w", err)
	}
	if len(doc.Suites) != 1 {
		return Run{}, fmt.Errorf("JUnit summary: %d test suites, want 1", len(doc.Suites))
	}
	s := doc.Suites[0]
	var run Run
	for _, p := range s.Properties {
		switch p.Name {
		case "selection":
			run.Name = p.Value
		case "kubernetes":
			run.Kubernetes = p.Value
		case "outrigger-commit":
			run.Commit = p.Value
		case "command":
			run.Command = p.Value
		case "focus":
			run.Focus = p.Value
		case "skip":
			run.Skip = p.Value
		}
	}
	var err error
	if run.Started, err = time.Parse(time.RFC3339, s.Timestamp); err != nil {
		return Run{}, fmt.Errorf("JUnit summary timestamp: %w", err)
	}
	if run.Elapsed, err = parseSeconds(s.Time); err != nil {
		return Run{}, err
	}
	for _, c := range s.Cases {
		res := Result{Name: c.Name, Status: "passed"}
		if res.Time, err = parseSeconds(c.Time); err != nil {
			return Run{}, err
		}
		switch {
		case c.Failure != nil:
			res.Status, res.Reason = "failed", c.Failure.Message
		case c.Skipped != nil:
			res.Status, res.Reason = "skipped", c.Skipped.Message
		}
		run.Results = append(run.Results, res)
	}
	return run, nil
}

func parseSeconds(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s + "s")
	if err != nil {
		return 0, fmt.Errorf("JUnit summary time %q: %w", s, err)
	}
	return d, nil
}
