// Package e2e runs upstream Kubernetes' own end-to-end tests against a real
// cluster of package cluster: the e2e.test binary that the controlplane
// module builds from k8s.io/kubernetes (`go test -c .../test/e2e`), run
// inside the cluster's harness network namespace, where the load balancer
// VIPs Outrigger serves and the nodes' IPs are reachable. docs/e2e.md says
// what runs and what passed.
//
// Nothing is pulled: the images the tests run are the project's own builds
// of agnhost and pause, named by a KUBE_TEST_REPO_LIST that points the
// suite's registries at outrigger.local.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Image names the suite asks for, under RepoList. The tags are those of
// test/utils/image/manifest.go in k8s.io/kubernetes v1.37.2; the agnhost
// built from that same source (test/images/agnhost/VERSION) is 2.66.1.
const (
	// E2ERegistry replaces registry.k8s.io/e2e-test-images.
	E2ERegistry = "outrigger.local/e2e-test-images"
	// GCRegistry replaces registry.k8s.io (the pause image).
	GCRegistry = "outrigger.local"
	// AgnhostImage is what the suite's agnhost pods run.
	AgnhostImage = E2ERegistry + "/agnhost:2.66.1"
	// PauseImage is what the suite's pause pods run.
	PauseImage = GCRegistry + "/pause:3.10.2"
)

// RepoList is the KUBE_TEST_REPO_LIST file's content: the registries of
// every image the selected tests use, moved to names the nodes have.
const RepoList = "promoterE2eRegistry: " + E2ERegistry + "\n" +
	"gcRegistry: " + GCRegistry + "\n"

// DefaultFocus selects upstream's load balancer tests and the cloud-provider
// SIG's own ([sig-cloud-provider], not [sig-cloud-provider-gcp], whose
// tests are GCE's). The suite of v1.37 has no [sig-cloud-provider] test
// (test/e2e/cloud is gone); older suites have one, a node deletion.
const DefaultFocus = `\[Feature:LoadBalancer\]|\[sig-cloud-provider\]`

// FastExclusions are what the fast subset (`make e2e-fast`, part of `make
// test` as root) leaves out of the full run: the two rolling-update tests,
// about 10 minutes each. The rest, every other load balancer test
// (an ingress reached, ports changed, the load balancer deleted, TCP and
// UDP, externalTrafficPolicy Local keeping the client's address, session
// affinity, source ranges, the cleanup finalizer), ran in 4 min 53 s on
// the 2-core machine.
var FastExclusions = []Exclusion{{
	Pattern: `should not have connectivity disruption during rolling update`,
	Reason:  "not in the fast subset: 10 minutes each (five rolling updates of a DaemonSet whose pods take 60 s to stop); make e2e-upstream runs it",
}}

// DefaultProvider is the e2e framework's provider-agnostic one: no load
// balancer test is skipped by it (older suites' sig-cloud-provider node
// deletion is: it needs an e2e provider that can delete a machine, aws or
// gce).
const DefaultProvider = "skeleton"

// Exclusion is a test the runner leaves out, and why.
type Exclusion struct {
	// Pattern is a Go regular expression matched against the test's full
	// name, as --ginkgo.skip is.
	Pattern string
	Reason  string
}

// DefaultExclusions are the focused tests the runner leaves out by
// default.
var DefaultExclusions = []Exclusion{}

// SkipRegexp joins the patterns for --ginkgo.skip ("" when none).
func SkipRegexp(ex []Exclusion) string {
	var ps []string
	for _, e := range ex {
		ps = append(ps, e.Pattern)
	}
	return strings.Join(ps, "|")
}

// Options configure one run of e2e.test.
type Options struct {
	// E2ETest is the e2e.test binary.
	E2ETest string
	// Kubectl is the kubectl binary the suite runs for exec, logs and
	// describe.
	Kubectl string
	// Netns is the network namespace to run in (a name under
	// /var/run/netns); empty runs in this process's namespace.
	Netns string
	// Kubeconfig must work from Netns.
	Kubeconfig string
	// RepoListFile holds RepoList.
	RepoListFile string
	// ReportDir receives junit_01.xml.
	ReportDir string
	Focus     string
	Skip      string
	Provider  string
	// NumNodes is the cluster's node count (--num-nodes; 0: not passed).
	// The suite counts the nodes itself only in its first process; tests
	// that need two nodes skip in the others without it.
	NumNodes int
	// Timeout bounds the whole suite (--ginkgo.timeout; ginkgo's own
	// default is one hour).
	Timeout time.Duration
	// Procs above 1 runs the suite in that many processes, by the ginkgo
	// CLI (Ginkgo), as upstream's CI does: its load balancer tests are
	// not [Serial] and spend their time waiting on the cloud and on pods.
	Procs int
	// Ginkgo is the ginkgo CLI of the module e2e.test was built from; used
	// when Procs > 1.
	Ginkgo string
	// Args are added last, so they override the above.
	Args []string
	// Out receives the suite's output.
	Out io.Writer
}

// Command is the e2e.test invocation for o: e2e.test itself, or with
// Procs > 1 the ginkgo CLI running it in Procs processes, the suite's
// selection and timeout as the CLI's flags and the rest after "--".
func Command(ctx context.Context, o Options) *exec.Cmd {
	suite := []string{
		"--kubeconfig=" + o.Kubeconfig,
		"--kubectl-path=" + o.Kubectl,
		"--provider=" + o.Provider,
		"--report-dir=" + o.ReportDir,
		// Log gathering from nodes is by SSH, which this cluster has not.
		"--disable-log-dump",
	}
	if o.NumNodes > 0 {
		suite = append(suite, fmt.Sprintf("--num-nodes=%d", o.NumNodes))
	}
	ginkgo := []string{"focus=" + o.Focus, "timeout=" + o.Timeout.String(), "v", "no-color"}
	if o.Skip != "" {
		ginkgo = append(ginkgo, "skip="+o.Skip)
	}
	var argv []string
	if o.Procs > 1 {
		argv = []string{o.Ginkgo, fmt.Sprintf("--procs=%d", o.Procs)}
		for _, f := range ginkgo {
			argv = append(argv, "--"+f)
		}
		argv = append(argv, o.E2ETest, "--")
		argv = append(append(argv, suite...), o.Args...)
	} else {
		argv = append([]string{o.E2ETest}, suite...)
		for _, f := range ginkgo {
			argv = append(argv, "--ginkgo."+f)
		}
		argv = append(argv, o.Args...)
	}
	if o.Netns != "" {
		argv = append([]string{"nsenter", "--net=/var/run/netns/" + o.Netns, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+o.RepoListFile)
	cmd.Stdout, cmd.Stderr = o.Out, o.Out
	// Its own process group: a Ctrl-C in the terminal reaches only the
	// runner, which passes one interrupt on (Cancel), as ginkgo takes a
	// second one as "stop now, no report".
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On the deadline, an interrupt first: ginkgo then reports what was
	// running and still writes the JUnit report.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	return cmd
}

// WaitNoCluster waits until no other cluster runs on the machine, then
// takes the cluster lock and returns its release. Only one cluster fits
// (fixed namespace names), and a cluster.Up that finds another run's state
// file cleans that cluster away as leftovers, killing whatever runs in it.
// Another cluster runs while the lock file (work + ".lock", the flock the
// cluster package's own Lock takes) is held, or while the state file
// exists (a cluster that does not lock). It polls every poll, up to
// timeout. The lock is released by the returned func.
func WaitNoCluster(parent context.Context, work string, poll, timeout time.Duration, out io.Writer) (release func(), err error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	work = filepath.Clean(work)
	stateFile, lockFile := work+".state.json", work+".lock"
	t := time.NewTicker(poll)
	defer t.Stop()
	said := false
	for {
		release, busy, err := tryLock(lockFile)
		if err != nil {
			return nil, err
		}
		if !busy {
			_, err := os.Stat(stateFile)
			if os.IsNotExist(err) {
				return release, nil
			}
			release()
			if err != nil {
				return nil, fmt.Errorf("checking for another cluster: %w", err)
			}
		}
		if !said {
			fmt.Fprintf(out, "Another cluster is running (%s is locked or %s exists); waiting up to %s for it to stop\n", lockFile, stateFile, timeout)
			said = true
		}
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return nil, fmt.Errorf("waiting for another cluster to stop: %w", err)
			}
			return nil, fmt.Errorf("another cluster is still running after %s (%s is locked or %s exists): not starting one over it", timeout, lockFile, stateFile)
		case <-t.C:
		}
	}
}

// tryLock takes an exclusive flock on path without blocking; busy when
// another open file holds it. A killed holder's lock goes with it.
func tryLock(path string) (release func(), busy bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("cluster lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("cluster lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, false, nil
}
