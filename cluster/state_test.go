package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

// A container runc froze (to signal all its processes) and was killed
// before thawing takes no SIGKILL: the teardown thaws every frozen cgroup
// under the cluster's, v1 and v2, and leaves the others as they are.
func TestThawCgroupTree(t *testing.T) {
	sysfs := t.TempDir()
	files := map[string]struct{ state, want string }{
		"freezer/outrigger/pod-a/freezer.state":            {"FROZEN\n", "THAWED"},
		"freezer/outrigger/pod-a/ctr/freezer.state":        {"FREEZING\n", "THAWED"},
		"freezer/outrigger/pod-b/freezer.state":            {"THAWED\n", "THAWED\n"},
		"freezer/elsewhere/freezer.state":                  {"FROZEN\n", "FROZEN\n"},
		"outrigger/pod-c/cgroup.freeze":                    {"1\n", "0"},
		"outrigger/pod-d/cgroup.freeze":                    {"0\n", "0\n"},
		"outrigger/pod-d/ctr-with-1-in-name/cgroup.freeze": {"0\n", "0\n"},
	}
	for name, f := range files {
		p := filepath.Join(sysfs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.state), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	thawCgroupTree(sysfs, "outrigger")
	for name, f := range files {
		got, err := os.ReadFile(filepath.Join(sysfs, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != f.want {
			t.Errorf("%s: %q, want %q", name, got, f.want)
		}
	}
}
