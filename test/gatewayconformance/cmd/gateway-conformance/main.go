// Command gateway-conformance runs the Gateway API's official conformance
// suite against Outrigger on the real cluster (root): it starts the cluster
// of cluster/ with the suite's echo backends (built from the suite's own
// source by `make gateway-images`), compiles this module's test, runs it in
// the harness's network namespace (where the load balancers' VIPs are
// routed), and writes the suite's report and a summary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/outrigger-ccm/outrigger/cluster"
	"github.com/outrigger-ccm/outrigger/cluster/e2e"
	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/gatewayapi"
)

func main() {
	// The cluster's API clients (controller-runtime's) log through klog.
	ctrllog.SetLogger(klog.NewKlogr())
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway-conformance:", err)
		os.Exit(1)
	}
}

func run() error {
	assets := apiserver.AssetsDir()
	fs := flag.NewFlagSet("gateway-conformance", flag.ExitOnError)
	reportDir := fs.String("report-dir", "../../.outrigger/gateway-conformance", "directory for the suite's report (report.yaml), its output (conformance.log), the summary (summary.md) and every cluster process's log")
	runTest := fs.String("run-test", "", "run only this test (its short name, e.g. HTTPRouteSimpleSameNamespace)")
	skip := fs.String("skip", "", "tests to skip, by short name, comma separated")
	timeout := fs.Duration("timeout", 40*time.Minute, "bound on the suite")
	nodes := fs.Int("nodes", 2, "number of nodes")
	outrigger := fs.String("outrigger-image", "../../bin/outrigger-image.tar", "Outrigger's image tarball (make image)")
	images := fs.String("images", filepath.Join(assets, "images"), "the cluster's OCI image tarballs (make cluster-images)")
	gatewayImages := fs.String("gateway-images", filepath.Join(assets, "gateway-images"), "the suite's images, built from its source (make gateway-images)")
	work := fs.String("workdir", "/var/tmp/outrigger-cluster", "the cluster's work directory")
	waitFree := fs.Duration("wait-for-other-cluster", 20*time.Minute, "how long to wait for another run's cluster to stop")
	publish := fs.String("publish", "", "the repository's root: copy the report to docs/gateway/conformance-report.yaml and its summary into docs/gateway.md (a full run only)")
	publishReport := fs.String("publish-report", "", "publish this report of an earlier full run (with -publish) and start nothing")
	channelName := fs.String("channel", "standard", "the Gateway API CRDs' channel: standard, or experimental (its retry features then stated and tested too); the report is published as that channel's")
	_ = fs.Parse(os.Args[1:])
	channel, err := gatewayapi.ParseChannel(*channelName)
	if err != nil {
		return err
	}
	if *publishReport != "" {
		if *publish == "" {
			return errors.New("-publish-report needs -publish")
		}
		return Publish(*publishReport, *publish)
	}

	var imgs []string
	for _, dir := range []string{*images, *gatewayImages} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
		if len(m) == 0 {
			return fmt.Errorf("no images in %s: run 'make cluster-images gateway-images'", dir)
		}
		imgs = append(imgs, m...)
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
	tmp, err := os.MkdirTemp("", "gateway-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// The test binary first: a compile error should not cost a cluster.
	testBin := filepath.Join(tmp, "conformance.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", testBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("compiling the conformance test: %w", err)
	}

	release, err := e2e.WaitNoCluster(ctx, *work, 10*time.Second, *waitFree, os.Stderr)
	if err != nil {
		return err
	}
	release()
	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Options{
		WorkDir:           *work,
		Nodes:             *nodes,
		OutriggerImage:    *outrigger,
		Images:            imgs,
		LogDir:            filepath.Join(*reportDir, "logs"),
		GatewayAPIChannel: channel,
		// Each Gateway's data plane in the Gateway's own namespace, where
		// the GatewayInfrastructure tests look for it: the class states
		// that feature in this mode only.
		GatewayNamespaceMode: gateway.NamespaceGateway,
	})
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	fmt.Fprintf(os.Stderr, "Cluster up in %s\n", time.Since(start).Round(time.Second))
	runErr := runSuite(ctx, c, testBin, tmp, *reportDir, *runTest, *skip, channel, *timeout)
	fmt.Fprintln(os.Stderr, "Stopping the cluster")
	downErr := c.Down()
	if runErr != nil {
		// The VIPs' routes: a node leaving one moves its flows.
		printTail(filepath.Join(*reportDir, "logs", "router.log"), 10)
	}
	summary, sumErr := summarize(filepath.Join(*reportDir, "report.yaml"), filepath.Join(*reportDir, "summary.md"))
	if sumErr == nil {
		fmt.Print(summary)
	}
	if runErr != nil {
		// Last, where a CI log that keeps only its end shows them.
		printFailures(filepath.Join(*reportDir, "conformance.log"))
	}
	var pubErr error
	switch {
	case *publish != "" && (*runTest != "" || *skip != ""):
		pubErr = errors.New("-publish takes a full run, without -run-test or -skip")
	case *publish != "" && sumErr == nil:
		pubErr = Publish(filepath.Join(*reportDir, "report.yaml"), *publish)
	}
	return errors.Join(runErr, downErr, sumErr, pubErr)
}

// printTail prints the last n lines of the file at path.
func printTail(path string, n int) {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway-conformance:", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Printf("%s, its last %d lines:\n%s\n", path, len(lines), strings.Join(lines, "\n"))
}

// printFailures prints the failed tests' last lines from the suite's output.
func printFailures(path string) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway-conformance:", err)
		return
	}
	defer f.Close()
	out, err := failedOutput(f, 15)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway-conformance:", err)
	}
	fmt.Print(out)
}

// runSuite runs the compiled test in the harness's network namespace.
func runSuite(ctx context.Context, c *cluster.Cluster, testBin, tmp, reportDir, runTest, skip string, channel gatewayapi.Channel, timeout time.Duration) error {
	kubeconfig := filepath.Join(tmp, "harness.kubeconfig")
	if err := e2e.RewriteKubeconfig(c.Kubeconfig, kubeconfig, c.APIServerAddress()); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(reportDir, "conformance.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/var/run/netns/"+cluster.HarnessNetns(), "--",
		testBin, "-test.v", "-test.timeout", timeout.String(), "-test.run", "^TestGatewayConformance$")
	cmd.Env = append(os.Environ(),
		"GATEWAY_CONFORMANCE_KUBECONFIG="+kubeconfig,
		"GATEWAY_CONFORMANCE_REPORT="+filepath.Join(reportDir, "report.yaml"),
		"GATEWAY_CONFORMANCE_RUN_TEST="+runTest,
		"GATEWAY_CONFORMANCE_SKIP="+skip,
		"GATEWAY_CONFORMANCE_CHANNEL="+string(channel),
	)
	// The suite's -v output (megabytes) goes to the log only; a failed
	// run ends with each failed test's last lines.
	cmd.Stdout = logf
	cmd.Stderr = logf
	fmt.Fprintf(os.Stderr, "Running %s (its output: %s)\n", cmd, logf.Name())
	started := time.Now()
	err = cmd.Run()
	fmt.Fprintf(os.Stderr, "The suite ran %s\n", time.Since(started).Round(time.Second))
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("the conformance suite failed: %w (the summary names the tests)", err)
	}
	return err
}
