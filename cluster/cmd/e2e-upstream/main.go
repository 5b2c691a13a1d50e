// Command e2e-upstream runs upstream Kubernetes' e2e tests for load
// balancers and the cloud-provider SIG against a real cluster whose
// cloud-controller-manager is Outrigger (docs/e2e.md): it starts the
// cluster (package cluster), runs e2e.test inside the harness network
// namespace, writes the JUnit report, a summary table and a JUnit summary
// (names, results, durations; no logs) to -report-dir, and stops the
// cluster. -fast runs the fast subset of `make test` (all but
// e2e.FastExclusions).
//
// It needs root, and `make cluster-binaries cluster-images e2e-binaries
// e2e-images build` first; `make e2e-upstream` does all of it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outrigger-ccm/outrigger/cluster"
	"github.com/outrigger-ccm/outrigger/cluster/e2e"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
)

func main() {
	// The cluster's API clients (controller-runtime's) log through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-upstream:", err)
		os.Exit(1)
	}
}

func run() error {
	assets := apiserver.AssetsDir()
	fs := flag.NewFlagSet("e2e-upstream", flag.ExitOnError)
	e2eTest := fs.String("e2e-test", filepath.Join(assets, "e2e.test"), "upstream's e2e.test binary")
	ginkgo := fs.String("ginkgo", filepath.Join(assets, "ginkgo"), "the ginkgo CLI that runs e2e.test in -procs processes")
	procs := fs.Int("procs", 3, "processes the suite runs in (by the ginkgo CLI when above 1; its load balancer tests are not [Serial])")
	reportDir := fs.String("report-dir", ".outrigger/e2e-upstream", "directory for the framework's JUnit report (junit_01.xml), the summary (summary.md, and summary.xml: names, results, durations), the suite's output and every cluster process's log")
	fast := fs.Bool("fast", false, "run the fast subset: the suite but e2e.FastExclusions (-skip overrides them)")
	command := fs.String("command", "e2e-upstream", "the command the JUnit summary (summary.xml) says was run (its focus and skip are recorded too)")
	focus := fs.String("focus", e2e.DefaultFocus, "--ginkgo.focus")
	skip := fs.String("skip", e2e.SkipRegexp(e2e.DefaultExclusions), "--ginkgo.skip")
	provider := fs.String("provider", e2e.DefaultProvider, "the e2e framework's --provider")
	timeout := fs.Duration("timeout", 90*time.Minute, "bound on the whole suite (with -fast: 20m unless set)")
	waitFree := fs.Duration("wait-for-other-cluster", 20*time.Minute, "how long to wait for another run's cluster to stop")
	nodes := fs.Int("nodes", 2, "number of nodes")
	outrigger := fs.String("outrigger-image", "bin/outrigger-image.tar", "Outrigger's image tarball (make image)")
	images := fs.String("images", filepath.Join(assets, "images"), "the cluster's OCI image tarballs (make cluster-images)")
	e2eImages := fs.String("e2e-images", filepath.Join(assets, "e2e-images"), "the images the suite's pods run, under the names of e2e.RepoList (make e2e-images)")
	work := fs.String("workdir", "/var/tmp/outrigger-cluster", "the cluster's work directory")
	_ = fs.Parse(os.Args[1:])
	extra := fs.Args() // passed on to e2e.test
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	selection, excluded := "full", e2e.DefaultExclusions
	if *fast {
		selection, excluded = "fast", append(slices.Clone(excluded), e2e.FastExclusions...)
		if !set["skip"] {
			*skip = e2e.SkipRegexp(excluded)
		}
		if !set["timeout"] {
			*timeout = 20 * time.Minute
		}
	}
	if set["focus"] || set["skip"] {
		selection = "focused"
	}

	needed := []struct{ path, make string }{
		{*e2eTest, "e2e-binaries"},
		{filepath.Join(assets, "kubectl"), "controlplane"},
		{filepath.Join(*e2eImages, "agnhost.tar"), "e2e-images"},
		{filepath.Join(*e2eImages, "pause.tar"), "e2e-images"},
	}
	if *procs > 1 {
		needed = append(needed, struct{ path, make string }{*ginkgo, "e2e-binaries"})
	}
	for _, f := range needed {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s is missing: run 'make %s'", f.path, f.make)
		}
	}
	focusRE, err := regexp.Compile(*focus)
	if err != nil {
		return fmt.Errorf("-focus: %w", err)
	}
	if err := os.MkdirAll(*reportDir, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(*reportDir)
	if err != nil {
		return err
	}
	*reportDir = abs

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Wait for a running cluster to stop; then cluster.Up takes the lock
	// itself (an flock per open file: this one must go first).
	release, err := e2e.WaitNoCluster(ctx, *work, 10*time.Second, *waitFree, os.Stderr)
	if err != nil {
		return err
	}
	release()
	var imgs []string
	for _, dir := range []string{*images, *e2eImages} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
		imgs = append(imgs, m...)
	}
	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Options{
		WorkDir:        *work,
		Nodes:          *nodes,
		OutriggerImage: *outrigger,
		Images:         imgs,
		LogDir:         filepath.Join(*reportDir, "logs"),
	})
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	fmt.Fprintf(os.Stderr, "Cluster up in %s\n", time.Since(start).Round(time.Second))
	// The version the cluster runs, from its API server: the binaries come
	// from the assets directory, which need not be this module's version
	// (make e2e-matrix).
	kubernetes := "unknown"
	if v, err := c.Client.Discovery().ServerVersion(); err != nil {
		fmt.Fprintf(os.Stderr, "Reading the API server's version: %v\n", err)
	} else {
		kubernetes = v.GitVersion
	}
	record := e2e.Run{Name: selection, Kubernetes: kubernetes, Commit: commit(ctx),
		Command: *command, Focus: *focus, Skip: *skip}
	runErr := runSuite(ctx, c, *reportDir, &record, e2e.Options{
		E2ETest:  *e2eTest,
		Ginkgo:   *ginkgo,
		Procs:    *procs,
		NumNodes: *nodes,
		Kubectl:  filepath.Join(assets, "kubectl"),
		Netns:    cluster.HarnessNetns(),
		Focus:    *focus,
		Skip:     *skip,
		Provider: *provider,
		Timeout:  *timeout,
		Args:     extra,
	})
	fmt.Fprintln(os.Stderr, "Stopping the cluster")
	downErr := c.Down()

	summary, sumErr := summarize(*reportDir, focusRE, excluded, record)
	if sumErr == nil {
		fmt.Print(summary)
	}
	return errors.Join(runErr, downErr, sumErr)
}

// runSuite runs e2e.test in the harness namespace with the suite's output
// in reportDir/e2e.log (and on stdout), and records when it started and
// how long it ran.
func runSuite(ctx context.Context, c *cluster.Cluster, reportDir string, record *e2e.Run, o e2e.Options) error {
	tmp, err := os.MkdirTemp("", "e2e-upstream-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	o.Kubeconfig = filepath.Join(tmp, "harness.kubeconfig")
	if err := e2e.RewriteKubeconfig(c.Kubeconfig, o.Kubeconfig, c.APIServerAddress()); err != nil {
		return err
	}
	o.RepoListFile = filepath.Join(tmp, "repo-list.yaml")
	if err := os.WriteFile(o.RepoListFile, []byte(e2e.RepoList), 0o644); err != nil {
		return err
	}
	o.ReportDir = reportDir
	logf, err := os.Create(filepath.Join(reportDir, "e2e.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	o.Out = io.MultiWriter(logf, os.Stdout)
	ctx, cancel := context.WithTimeout(ctx, o.Timeout+5*time.Minute)
	defer cancel()
	cmd := e2e.Command(ctx, o)
	fmt.Fprintf(os.Stderr, "Running %s\n", cmd)
	record.Started = time.Now()
	err = cmd.Run()
	record.Elapsed = time.Since(record.Started)
	fmt.Fprintf(os.Stderr, "e2e.test ran %s\n", record.Elapsed.Round(time.Second))
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("e2e.test: %w (failed tests are in the summary)", err)
	}
	return err
}

// summarize writes reportDir/summary.md and the JUnit summary
// reportDir/summary.xml (names, results, durations; no logs) from the
// framework's JUnit report.
func summarize(reportDir string, focus *regexp.Regexp, excluded []e2e.Exclusion, record e2e.Run) (string, error) {
	f, err := os.Open(filepath.Join(reportDir, "junit_01.xml"))
	if err != nil {
		return "", fmt.Errorf("no JUnit report: %w", err)
	}
	defer f.Close()
	res, err := e2e.Summarize(f, focus, excluded)
	if err != nil {
		return "", err
	}
	md := e2e.Markdown(res)
	if err := os.WriteFile(filepath.Join(reportDir, "summary.md"), []byte(md), 0o644); err != nil {
		return "", err
	}
	record.Results = res
	var x bytes.Buffer
	if err := e2e.WriteJUnit(&x, record); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(reportDir, "summary.xml"), x.Bytes(), 0o644); err != nil {
		return "", err
	}
	return md, nil
}

// commit is the commit of the work tree the run tested, "-dirty" added
// when tracked files differ from it; "unknown" outside a git checkout.
func commit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if exec.CommandContext(ctx, "git", "diff", "--quiet", "HEAD").Run() != nil {
		c += "-dirty"
	}
	return c
}
