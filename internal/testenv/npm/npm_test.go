package npm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// installed tells a node_modules npm filled from package-lock.json from one
// that holds something else or lacks something.
func TestInstalled(t *testing.T) {
	write := func(dir, path, content string) {
		t.Helper()
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const lock = `{"packages": {"": {"name": "p"},
		"node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"},
		"node_modules/b": {"version": "2.0.0", "integrity": "sha512-b"},
		"node_modules/c": {"version": "3.0.0", "integrity": "sha512-c", "optional": true}}}`
	for _, tc := range []struct {
		name, hidden, wantErr string
	}{
		{"as locked", `{"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"}, "node_modules/b": {"version": "2.0.0", "integrity": "sha512-b"}}}`, ""},
		{"another version", `{"packages": {"node_modules/a": {"version": "1.0.1", "integrity": "sha512-a1"}, "node_modules/b": {"version": "2.0.0", "integrity": "sha512-b"}}}`, "holds node_modules/a 1.0.1"},
		{"one missing", `{"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "sha512-a"}}}`, "lacks node_modules/b"},
		{"never installed", "", "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write(dir, "package-lock.json", lock)
			if tc.hidden != "" {
				write(dir, "node_modules/.package-lock.json", tc.hidden)
			}
			err := installed(dir)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("installed: %v, want %q", err, tc.wantErr)
			}
		})
	}
}
