package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"text/tabwriter"
)

// Failed counts failed cases.
func Failed(results []Result) int {
	n := 0
	for _, r := range results {
		if r.Failure != "" {
			n++
		}
	}
	return n
}

// WriteText writes one line per case, then the failures in full.
func WriteText(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var passed, skipped int
	for _, r := range results {
		status := "PASS"
		switch {
		case r.Failure != "":
			status = "FAIL"
		case r.Skipped != "":
			status, skipped = "SKIP", skipped+1
		default:
			passed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", status, r.Capability, r.Name, r.Duration.Round(1e6))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Failure != "" {
			fmt.Fprintf(w, "\nFAIL %s: %s\n  %s\n", r.Capability, r.Name, r.Failure)
		} else if r.Skipped != "" {
			fmt.Fprintf(w, "\nSKIP %s: %s: %s\n", r.Capability, r.Name, r.Skipped)
		}
	}
	_, err := fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", passed, Failed(results), skipped)
	return err
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// WriteJUnit writes the results as JUnit XML, one suite per capability,
// for CI systems.
func WriteJUnit(w io.Writer, results []Result) error {
	var out junitSuites
	index := map[string]int{}
	for _, r := range results {
		i, ok := index[r.Capability]
		if !ok {
			i = len(out.Suites)
			index[r.Capability] = i
			out.Suites = append(out.Suites, junitSuite{Name: "outrigger-conformance/" + r.Capability})
		}
		s := &out.Suites[i]
		c := junitCase{Name: r.Name, Classname: "outrigger.conformance." + r.Capability, Time: r.Duration.Seconds()}
		if r.Failure != "" {
			c.Failure = &junitMessage{Message: r.Failure, Body: r.Failure}
			s.Failures++
		} else if r.Skipped != "" {
			c.Skipped = &junitMessage{Message: r.Skipped}
			s.Skipped++
		}
		s.Tests++
		s.Time += c.Time
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
