package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// testLine is a line of go test -v's output that says which test the lines
// after it belong to: "=== RUN", "=== CONT", "=== NAME", or a result line
// such as "--- FAIL: name (1.20s)", indented for subtests.
var testLine = regexp.MustCompile(`^\s*(?:=== (?:RUN|CONT|NAME|PAUSE)|--- (FAIL|PASS|SKIP):)\s+(\S+)`)

// failedOutput returns, for each test that failed and has no failed
// subtest, the last perTest lines it printed. The suite's tests run in
// parallel and print thousands of lines; a CI log keeps its end, where this
// goes, so that a failure says what failed and how without the whole log.
func failedOutput(log io.Reader, perTest int) (string, error) {
	lines := map[string][]string{}
	var failed []string
	current := ""
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := testLine.FindStringSubmatch(line); m != nil {
			current = m[2]
			if m[1] == "FAIL" {
				failed = append(failed, current)
			}
			continue
		}
		// A test's own lines are indented; an unindented one (FAIL, ok, a
		// log line of the suite's) is nobody's.
		if !strings.HasPrefix(line, " ") {
			current = ""
		}
		if current == "" || strings.TrimSpace(line) == "" {
			continue
		}
		l := append(lines[current], line)
		if len(l) > perTest {
			l = l[len(l)-perTest:]
		}
		lines[current] = l
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading the suite's output: %w", err)
	}
	sort.Strings(failed)
	var b strings.Builder
	for i, name := range failed {
		// A parent fails with its subtests; its own output is theirs.
		if i+1 < len(failed) && strings.HasPrefix(failed[i+1], name+"/") {
			continue
		}
		fmt.Fprintf(&b, "--- FAIL: %s, its last lines:\n", name)
		for _, l := range lines[name] {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String(), nil
}
