package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// State is what a run made, written before each thing is made so that a
// later run can remove it even after a kill -9. It lives next to (not
// inside) the work directory.
type State struct {
	// WorkDir holds every file of the cluster; removed last.
	WorkDir string `json:"workDir"`
	// CgroupBase is the cgroup path (the same in every hierarchy) under
	// which every process of the cluster runs: the harness moves itself
	// there (pids hierarchy) before starting anything, so every child,
	// container and shim inherits it.
	CgroupBase string `json:"cgroupBase,omitempty"`
	// CgroupDirs are the cgroup directories the harness made above and at
	// CgroupBase (such as its memory cgroup's path in the other
	// hierarchies), removed after everything below them.
	CgroupDirs []string `json:"cgroupDirs,omitempty"`
	// HarnessCgroup is the pids cgroup the harness was in before it moved
	// under CgroupBase, where it goes back.
	HarnessCgroup string `json:"harnessCgroup,omitempty"`
	// Netns are the network namespaces (names under /var/run/netns).
	Netns []string `json:"netns,omitempty"`
	// Mounts are mount points on the host: the private bind of the
	// directory holding the nodes' mount namespace files, and those files.
	Mounts []string `json:"mounts,omitempty"`
	// Dirs are directories outside WorkDir to remove (envtest's etcd data
	// and certificates).
	Dirs []string `json:"dirs,omitempty"`
	// NetnsDirCreated says /var/run/netns did not exist before this run:
	// `ip netns add` made it (a bind mount on itself), so it goes when no
	// namespace is left in it.
	NetnsDirCreated bool `json:"netnsDirCreated,omitempty"`
}

// StatePath is where a run over work keeps its state.
func StatePath(work string) string { return filepath.Clean(work) + ".state.json" }

func (s *State) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := StatePath(s.WorkDir) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing the state file: %w", err)
	}
	return os.Rename(tmp, StatePath(s.WorkDir))
}

func (s *State) addNetns(n string) error { s.Netns = append(s.Netns, n); return s.save() }
func (s *State) addMount(m string) error { s.Mounts = append(s.Mounts, m); return s.save() }
func (s *State) addDir(d string) error   { s.Dirs = append(s.Dirs, d); return s.save() }

// LoadState reads the state a run over work left, or nil when there is none.
func LoadState(work string) (*State, error) {
	data, err := os.ReadFile(StatePath(work))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("malformed state file %s: %w", StatePath(work), err)
	}
	return &s, nil
}

// Cleanup removes everything a run recorded in its state, in the order that
// lets each step succeed: processes (every one in the cluster's cgroups but
// this one), cgroups, mount namespaces, network namespaces (which takes the
// bridge, the veths, and every iptables rule kube-proxy and the CNI plugins
// wrote, all of them inside the namespaces), then files. It is idempotent
// and reports what it removed on out.
func Cleanup(s *State, out io.Writer) error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.CgroupBase != "" {
		n, err := killCgroupTree(s.CgroupBase)
		if n > 0 {
			fmt.Fprintf(out, "cleanup: killed %d processes under cgroup %s\n", n, s.CgroupBase)
		}
		errs = append(errs, err)
		errs = append(errs, leaveCgroup(s.CgroupBase, s.HarnessCgroup))
		removed, err := removeCgroups(s.CgroupBase)
		dirs := append([]string(nil), s.CgroupDirs...)
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := unix.Rmdir(d); err == nil {
				removed++
			} else if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
		if removed > 0 {
			fmt.Fprintf(out, "cleanup: removed %d cgroup directories under %s\n", removed, s.CgroupBase)
		}
		errs = append(errs, err)
	}
	// Mount namespace files first, then the directory's private bind.
	mounts := append([]string(nil), s.Mounts...)
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		if !isMountPoint(m) {
			continue
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			continue
		}
		fmt.Fprintf(out, "cleanup: unmounted %s\n", m)
	}
	for _, ns := range s.Netns {
		if _, err := os.Stat("/var/run/netns/" + ns); err != nil {
			continue
		}
		if err := exec.Command("ip", "netns", "delete", ns).Run(); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", ns, err))
			continue
		}
		fmt.Fprintf(out, "cleanup: deleted network namespace %s\n", ns)
	}
	if s.NetnsDirCreated {
		if entries, err := os.ReadDir(netnsDir); err == nil && len(entries) == 0 {
			if isMountPoint(netnsDir) {
				errs = append(errs, unix.Unmount(netnsDir, unix.MNT_DETACH))
			}
			errs = append(errs, os.Remove(netnsDir))
			fmt.Fprintf(out, "cleanup: removed %s (made by ip netns for this run)\n", netnsDir)
		}
	}
	for _, d := range append(append([]string(nil), s.Dirs...), s.WorkDir) {
		if d == "" {
			continue
		}
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
			continue
		}
		fmt.Fprintf(out, "cleanup: removed %s\n", d)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(StatePath(s.WorkDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// netnsDir is where `ip netns` keeps named namespaces (/var/run is a link
// to it on Debian).
const netnsDir = "/run/netns"

func isMountPoint(p string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == p {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// cgroupHierarchies are the mount points of every cgroup hierarchy (v1
// controllers, named ones, and the v2 one of a hybrid setup).
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var roots []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		sep := strings.Index(line, " - ")
		if sep < 0 {
			continue
		}
		fields, post := strings.Fields(line[:sep]), strings.Fields(line[sep+3:])
		if len(post) > 0 && (post[0] == "cgroup" || post[0] == "cgroup2") && len(fields) > 4 {
			roots = append(roots, unescapeMount(fields[4]))
		}
	}
	return roots, sc.Err()
}

// pidsHierarchy is where processes are counted and killed: the v1 pids
// controller, or the unified hierarchy on a pure cgroup v2 machine.
func pidsHierarchy() string {
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		return "/sys/fs/cgroup/pids"
	}
	return "/sys/fs/cgroup"
}

// killCgroupTree SIGKILLs every process under base (pids hierarchy) except
// this one, until none is left.
func killCgroupTree(base string) (int, error) {
	root := filepath.Join(pidsHierarchy(), base)
	if _, err := os.Stat(root); err != nil {
		return 0, nil
	}
	self := os.Getpid()
	killed := map[int]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A container runc froze (it freezes one to signal all of its
		// processes) and was killed before thawing stays frozen: its
		// processes sleep in the freezer and take no SIGKILL until thawed.
		thawCgroupTree("/sys/fs/cgroup", base)
		pids := cgroupProcs(root)
		left := 0
		for _, pid := range pids {
			if pid == self {
				continue
			}
			left++
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed[pid] = true
			}
		}
		if left == 0 {
			return len(killed), nil
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("%d processes under %s survive SIGKILL", left, root)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// thawCgroupTree thaws every frozen cgroup under base, in the cgroup file
// system mounted at sysfs: the v1 freezer
// hierarchy's freezer.state (FROZEN, or FREEZING when runc was killed
// mid-freeze), or cgroup v2's cgroup.freeze. The walk goes parents first,
// as a child cannot thaw under a frozen parent.
func thawCgroupTree(sysfs, base string) {
	thaw := func(root, file string, frozen func(state string) bool, thawed string) {
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			f := filepath.Join(p, file)
			if data, err := os.ReadFile(f); err == nil && frozen(strings.TrimSpace(string(data))) {
				_ = os.WriteFile(f, []byte(thawed), 0o644)
			}
			return nil
		})
	}
	thaw(filepath.Join(sysfs, "freezer", base), "freezer.state", func(s string) bool { return s == "FROZEN" || s == "FREEZING" }, "THAWED")
	thaw(filepath.Join(sysfs, base), "cgroup.freeze", func(s string) bool { return s == "1" }, "0")
}

func cgroupProcs(root string) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// leaveCgroup moves this process out of base, back to the cgroup it came
// from (else base's parent), so that base can be removed.
func leaveCgroup(base, back string) error {
	h := pidsHierarchy()
	own, err := os.ReadFile(filepath.Join(h, base, "harness", "cgroup.procs"))
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	for _, f := range strings.Fields(string(own)) {
		if f == self {
			if back == "" {
				back = filepath.Dir(base)
			}
			parent := filepath.Join(h, back, "cgroup.procs")
			if err := os.WriteFile(parent, []byte(self), 0o644); err != nil {
				return fmt.Errorf("leaving cgroup %s: %w", base, err)
			}
		}
	}
	return nil
}

// removeCgroups removes base and everything under it in every hierarchy,
// deepest first (cgroup directories are removed with rmdir).
func removeCgroups(base string) (int, error) {
	roots, err := cgroupHierarchies()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range roots {
		top := filepath.Join(r, base)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for try := 0; try < 50; try++ {
				// A just-killed process may take a moment to leave.
				if err = unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
				continue
			}
			n++
		}
	}
	return n, errors.Join(errs...)
}

// ErrBusy is returned when another cluster runs over the same work
// directory: its namespaces and state must not be touched.
var ErrBusy = errors.New("another cluster is running on this machine")

// Lock takes the machine-wide lock of a cluster over work (an flock, so a
// killed run's lock goes with it, and its leftovers can be cleaned). It
// fails with ErrBusy at once when a running cluster holds it.
func Lock(work string) (release func(), err error) {
	path := filepath.Clean(work) + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (it holds %s): stop it first", ErrBusy, path)
		}
		return nil, fmt.Errorf("cluster lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
