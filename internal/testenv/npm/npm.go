// Package npm installs a Node.js package's dependencies for the tests that
// run a JavaScript plugin, once at a time across parallel test binaries.
package npm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Install installs the dependencies of the Node.js package in dir with
// `npm ci`, unless its node_modules already holds exactly what its
// package-lock.json names. Several test packages use the same plugin
// (examples/plugin-js) and go test runs packages in parallel: two `npm ci`
// into one node_modules would delete each other's files. A lock file (in the
// temporary directory, so the tree stays clean) makes one install at a time;
// those waiting then find it done.
func Install(t testing.TB, dir string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(abs))
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "outrigger-npm-"+hex.EncodeToString(sum[:8])+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	err = installed(abs)
	if err == nil {
		return
	}
	t.Logf("npm ci in %s: %v", abs, err)
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = abs
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", abs, err, out)
	}
	if err := installed(abs); err != nil {
		t.Fatalf("after npm ci in %s: %v", abs, err)
	}
}

// installed compares package-lock.json with the record npm keeps of what
// it put in node_modules (node_modules/.package-lock.json): every package
// npm installed is the locked version, and every package locked (but
// optional ones, which depend on the platform) is installed.
func installed(dir string) error {
	type pkg struct {
		Version   string `json:"version"`
		Integrity string `json:"integrity"`
		Optional  bool   `json:"optional"`
	}
	read := func(path string) (map[string]pkg, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var lock struct {
			Packages map[string]pkg `json:"packages"`
		}
		if err := json.Unmarshal(b, &lock); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		delete(lock.Packages, "") // the package itself
		return lock.Packages, nil
	}
	want, err := read(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	have, err := read(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return err
	}
	for name, h := range have {
		if w, ok := want[name]; !ok || w.Version != h.Version || w.Integrity != h.Integrity {
			return fmt.Errorf("node_modules holds %s %s, package-lock.json %s", name, h.Version, w.Version)
		}
	}
	for name, w := range want {
		if _, ok := have[name]; !ok && !w.Optional {
			return fmt.Errorf("node_modules lacks %s", name)
		}
	}
	return nil
}
