package layout

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestIntegrationTestsNamedSo: a test file is tagged integration (it
// starts the control plane) exactly when it is named *_integration_test.go,
// so a reader knows from the name which tests need a real API server.
func TestIntegrationTestsNamedSo(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "*_test.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) == 0 {
		t.Fatal("no test files listed")
	}
	for _, f := range files {
		tagged, err := integrationTagged("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		named := strings.HasSuffix(f, "_integration_test.go")
		switch {
		case tagged && !named:
			t.Errorf("%s is tagged integration: name it *_integration_test.go", f)
		case named && !tagged:
			t.Errorf("%s is named *_integration_test.go without the integration tag", f)
		}
	}
}

// integrationTagged says whether a Go file's build constraint, before its
// package clause, names the integration tag.
func integrationTagged(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "package ") {
			return false, nil
		}
		if strings.HasPrefix(line, "//go:build ") && strings.Contains(" "+strings.NewReplacer("(", " ", ")", " ", "&&", " ", "||", " ").Replace(line[len("//go:build "):])+" ", " integration ") {
			return true, nil
		}
	}
	return false, sc.Err()
}
