package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// report is a JUnit report as the e2e framework writes it (ginkgo's
// reporter, failure text in the body, no message attribute), cut down.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="2" time="100">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="6" skipped="3" failures="2">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow]" classname="Kubernetes e2e suite" status="passed" time="12.4"></testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]" classname="Kubernetes e2e suite" status="failed" time="130">
      <failure message="" type="failed">[FAILED] service is not reachable within 2m0s timeout on endpoint mutability-test:80 over TCP protocol
In [It] at: /root/go/pkg/mod/k8s.io/kubernetes@v1.36.3/test/e2e/network/loadbalancer.go:156 @ 11/23/26 12:40:01.000
</failure>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work from pods" classname="Kubernetes e2e suite" status="timedout" time="900">
      <failure message="" type="timedout">[TIMEDOUT] A suite timeout occurred
In [It] at: /root/go/pkg/mod/k8s.io/kubernetes@v1.36.3/test/e2e/network/loadbalancer.go:1221 @ 11/23/26 13:40:01.000
</failure>
    </testcase>
    <testcase name="[It] [sig-cloud-provider] [Feature:CloudProvider] [Disruptive] Nodes should be deleted on API server if it doesn't exist in the cloud provider" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for providers [aws gce] (not skeleton)"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] LoadBalancers [Feature:LoadBalancer] should be able to create LoadBalancer Service without NodePort and change it [Slow]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] CSI Volumes should not be here" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>
`

func TestSummarize(t *testing.T) {
	excluded := []Exclusion{{Pattern: `LoadBalancer.Service.without.NodePort`, Reason: "no node ports: the local provider forwards to node ports"}}
	got, err := Summarize(strings.NewReader(report), regexp.MustCompile(DefaultFocus), excluded)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Name: "[sig-network] LoadBalancers [Feature:LoadBalancer] should handle load balancer cleanup finalizer for service [Slow]", Status: "passed", Time: 12400 * time.Millisecond},
		{Name: "[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]", Status: "failed", Time: 130 * time.Second,
			Reason: "service is not reachable within 2m0s timeout on endpoint mutability-test:80 over TCP protocol (test/e2e/network/loadbalancer.go:156)"},
		{Name: "[sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer] [Slow] should work from pods", Status: "failed", Time: 900 * time.Second,
			Reason: "timedout: A suite timeout occurred (test/e2e/network/loadbalancer.go:1221)"},
		{Name: "[sig-cloud-provider] [Feature:CloudProvider] [Disruptive] Nodes should be deleted on API server if it doesn't exist in the cloud provider", Status: "skipped", Time: 100 * time.Millisecond,
			Reason: "Only supported for providers [aws gce] (not skeleton)"},
		{Name: "[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to create LoadBalancer Service without NodePort and change it [Slow]", Status: "skipped",
			Reason: "no node ports: the local provider forwards to node ports"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
}

func TestSummarizeSuiteFailure(t *testing.T) {
	// A failed BeforeSuite fails every test: it must show although it
	// matches no focus.
	const r = `<testsuites><testsuite>
<testcase name="[SynchronizedBeforeSuite]" status="failed" time="1800"><failure type="failed">[FAILED] Error waiting for all pods to be running and ready
In [SynchronizedBeforeSuite] at: /root/go/pkg/mod/k8s.io/kubernetes@v1.36.3/test/e2e/e2e.go:232 @ 11/23/26</failure></testcase>
</testsuite></testsuites>`
	got, err := Summarize(strings.NewReader(r), regexp.MustCompile(DefaultFocus), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{Name: "[SynchronizedBeforeSuite]", Status: "failed", Time: 1800 * time.Second,
		Reason: "Error waiting for all pods to be running and ready (test/e2e/e2e.go:232)"}}
	if !slices.Equal(got, want) {
		t.Errorf("Summarize:\n got %+v\nwant %+v", got, want)
	}
}

func TestSummarizeBadXML(t *testing.T) {
	if _, err := Summarize(strings.NewReader("<testsuites"), regexp.MustCompile("x"), nil); err == nil {
		t.Error("Summarize of a truncated report: no error")
	}
}

func TestMarkdown(t *testing.T) {
	got := Markdown([]Result{
		{Name: "a [Slow]", Status: "passed", Time: 1500 * time.Millisecond},
		{Name: "b", Status: "failed", Reason: "x | y", Time: time.Minute},
		{Name: "c", Status: "skipped", Reason: "why"},
	})
	want := "| result | test | time | reason |\n| --- | --- | --- | --- |\n" +
		"| passed | a [Slow] | 2s |  |\n" +
		"| failed | b | 1m0s | x \\| y |\n" +
		"| skipped | c | 0s | why |\n" +
		"\n1 passed, 1 failed, 1 skipped.\n"
	if got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		o        Options
		wantArgv []string
	}{{
		name: "in the harness namespace",
		o: Options{
			E2ETest: "/a/e2e.test", Kubectl: "/a/kubectl", Netns: "orc-harness",
			Kubeconfig: "/t/kc", RepoListFile: "/t/repo.yaml", ReportDir: "/r", Focus: "F", Skip: "S", Provider: "skeleton", NumNodes: 2,
			Timeout: 90 * time.Minute, Args: []string{"--ginkgo.dry-run"},
		},
		wantArgv: []string{"nsenter", "--net=/var/run/netns/orc-harness", "--", "/a/e2e.test",
			"--kubeconfig=/t/kc", "--kubectl-path=/a/kubectl", "--provider=skeleton", "--report-dir=/r", "--disable-log-dump", "--num-nodes=2",
			"--ginkgo.focus=F", "--ginkgo.timeout=1h30m0s", "--ginkgo.v", "--ginkgo.no-color", "--ginkgo.skip=S", "--ginkgo.dry-run"},
	}, {
		name: "here, no skip, no node count",
		o: Options{E2ETest: "/a/e2e.test", Kubectl: "k", Kubeconfig: "kc", RepoListFile: "/t/repo.yaml", ReportDir: "r", Focus: "F",
			Provider: "local", Timeout: time.Hour},
		wantArgv: []string{"/a/e2e.test", "--kubeconfig=kc", "--kubectl-path=k", "--provider=local", "--report-dir=r",
			"--disable-log-dump", "--ginkgo.focus=F", "--ginkgo.timeout=1h0m0s", "--ginkgo.v", "--ginkgo.no-color"},
	}, {
		name: "in three processes",
		o: Options{E2ETest: "/a/e2e.test", Ginkgo: "/a/ginkgo", Procs: 3, Kubectl: "k", Kubeconfig: "kc", RepoListFile: "/t/repo.yaml",
			ReportDir: "r", Focus: "F", Skip: "S", Provider: "local", NumNodes: 2, Timeout: time.Hour, Args: []string{"--x"}},
		wantArgv: []string{"/a/ginkgo", "--procs=3", "--focus=F", "--timeout=1h0m0s", "--v", "--no-color", "--skip=S", "/a/e2e.test", "--",
			"--kubeconfig=kc", "--kubectl-path=k", "--provider=local", "--report-dir=r", "--disable-log-dump", "--num-nodes=2", "--x"},
	}, {
		name: "one process: no ginkgo CLI",
		o: Options{E2ETest: "/a/e2e.test", Ginkgo: "/a/ginkgo", Procs: 1, Kubectl: "k", Kubeconfig: "kc", RepoListFile: "/t/repo.yaml",
			ReportDir: "r", Focus: "F", Provider: "local", NumNodes: 2, Timeout: time.Hour},
		wantArgv: []string{"/a/e2e.test", "--kubeconfig=kc", "--kubectl-path=k", "--provider=local", "--report-dir=r",
			"--disable-log-dump", "--num-nodes=2", "--ginkgo.focus=F", "--ginkgo.timeout=1h0m0s", "--ginkgo.v", "--ginkgo.no-color"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := Command(context.Background(), tc.o)
			argv := append([]string{filepath.Base(cmd.Path)}, cmd.Args[1:]...)
			if filepath.IsAbs(tc.wantArgv[0]) {
				argv[0] = cmd.Path
			}
			if !slices.Equal(argv, tc.wantArgv) {
				t.Errorf("argv:\n got %q\nwant %q", argv, tc.wantArgv)
			}
			if !slices.Contains(cmd.Env, "KUBE_TEST_REPO_LIST="+tc.o.RepoListFile) {
				t.Errorf("environment lacks KUBE_TEST_REPO_LIST=%s", tc.o.RepoListFile)
			}
		})
	}
}

func TestSkipRegexp(t *testing.T) {
	if got := SkipRegexp(nil); got != "" {
		t.Errorf("SkipRegexp(nil) = %q, want empty", got)
	}
	if got := SkipRegexp([]Exclusion{{Pattern: "a"}, {Pattern: `b\[c\]`}}); got != `a|b\[c\]` {
		t.Errorf("SkipRegexp = %q", got)
	}
	for _, e := range DefaultExclusions {
		if _, err := regexp.Compile(e.Pattern); err != nil || e.Reason == "" {
			t.Errorf("exclusion %+v: a valid pattern and a reason are needed (%v)", e, err)
		}
	}
}

// removeOnWrite removes a file when the waiter first says it is waiting:
// the file goes away while WaitNoCluster polls.
type removeOnWrite struct {
	t    *testing.T
	path string
}

func (r removeOnWrite) Write(p []byte) (int, error) {
	if err := os.Remove(r.path); err != nil {
		r.t.Error(err)
	}
	return len(p), nil
}

// releaseOnWrite releases another holder's lock when the waiter first says
// it is waiting.
type releaseOnWrite struct{ release func() }

func (r releaseOnWrite) Write(p []byte) (int, error) {
	r.release()
	return len(p), nil
}

func TestWaitNoCluster(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// setup makes the other run's traces and returns what the waiter's
		// output does (io.Discard: the traces stay).
		setup   func(t *testing.T, work string) io.Writer
		timeout time.Duration
		wantErr string
	}{{
		name:  "nothing running",
		setup: func(*testing.T, string) io.Writer { return io.Discard },
	}, {
		name: "state file stays",
		setup: func(t *testing.T, work string) io.Writer {
			writeFile(t, work+".state.json")
			return io.Discard
		},
		wantErr: ".state.json exists): not starting",
	}, {
		name: "state file removed while waiting",
		setup: func(t *testing.T, work string) io.Writer {
			writeFile(t, work+".state.json")
			return removeOnWrite{t, work + ".state.json"}
		},
	}, {
		name: "lock held",
		setup: func(t *testing.T, work string) io.Writer {
			release, busy, err := tryLock(work + ".lock")
			if err != nil || busy {
				t.Fatalf("taking the lock: busy %v, %v", busy, err)
			}
			t.Cleanup(release)
			return io.Discard
		},
		wantErr: "not starting one over it",
	}, {
		name: "lock released while waiting",
		setup: func(t *testing.T, work string) io.Writer {
			release, busy, err := tryLock(work + ".lock")
			if err != nil || busy {
				t.Fatalf("taking the lock: busy %v, %v", busy, err)
			}
			return releaseOnWrite{release}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "outrigger-cluster")
			out := tc.setup(t, work)
			release, err := WaitNoCluster(ctx, work, time.Millisecond, 50*time.Millisecond, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				// The other run's state file is left alone.
				if _, err := os.Stat(work + ".state.json"); tc.name == "state file stays" && err != nil {
					t.Errorf("state file: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Held: another waiter cannot start a cluster now.
			if _, busy, _ := tryLock(work + ".lock"); !busy {
				t.Error("lock not held after WaitNoCluster")
			}
			release()
			r2, busy, err := tryLock(work + ".lock")
			if err != nil || busy {
				t.Errorf("lock still held after release: busy %v, %v", busy, err)
			} else {
				r2()
			}
		})
	}

	work := filepath.Join(t.TempDir(), "outrigger-cluster")
	writeFile(t, work+".state.json")
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := WaitNoCluster(canceled, work, time.Millisecond, time.Minute, io.Discard); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("canceled: error %v, want context canceled", err)
	}
}

func writeFile(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRewriteKubeconfig(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "admin"), filepath.Join(dir, "harness")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:41234", CertificateAuthorityData: []byte("CA"), TLSServerName: "localhost"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("CERT"), ClientKeyData: []byte("KEY")}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, src); err != nil {
		t.Fatal(err)
	}
	if err := RewriteKubeconfig(src, dst, "198.18.0.1:6443"); err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.LoadFromFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	c := got.Clusters["envtest"]
	if c.Server != "https://198.18.0.1:6443" || c.TLSServerName != "" || string(c.CertificateAuthorityData) != "CA" {
		t.Errorf("cluster = %+v, want server https://198.18.0.1:6443, no tls-server-name, the CA kept", c)
	}
	if a := got.AuthInfos["admin"]; a == nil || string(a.ClientCertificateData) != "CERT" || string(a.ClientKeyData) != "KEY" {
		t.Errorf("credentials not kept: %+v", a)
	}
	if err := RewriteKubeconfig(filepath.Join(dir, "missing"), dst, "198.18.0.1:6443"); err == nil {
		t.Error("missing source: no error")
	}
}

// TestImagesAreMakes checks that the image names the runner's RepoList
// leads the suite to are those `make e2e-images` packs (the Makefile's tags
// are checked against the suite's own manifest in controlplane/images/e2e).
func TestImagesAreMakes(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`(?m)^E2E_AGNHOST_VERSION := (\S+)$`).FindSubmatch(mk)
	if v == nil || AgnhostImage != E2ERegistry+"/agnhost:"+string(v[1]) {
		t.Errorf("AgnhostImage %s, but the Makefile packs agnhost %q", AgnhostImage, v)
	}
	p := regexp.MustCompile(`(?m)^E2E_PAUSE_VERSION := (\S+)$`).FindSubmatch(mk)
	if p == nil || PauseImage != GCRegistry+"/pause:"+string(p[1]) {
		t.Errorf("PauseImage %s, but the Makefile packs pause %q", PauseImage, p)
	}
}

// TestFastSubset checks the fast subset against the load balancer tests of
// the suite the Makefile builds (testdata: `e2e.test --list-tests`): it
// leaves out the two rolling-update tests and nothing else.
func TestFastSubset(t *testing.T) {
	b, err := os.ReadFile("testdata/tests-v1.37.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	focus, skip := regexp.MustCompile(DefaultFocus), regexp.MustCompile(SkipRegexp(append(slices.Clone(DefaultExclusions), FastExclusions...)))
	var in, out []string
	for _, name := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !focus.MatchString(name) {
			t.Errorf("listed but not selected: %s", name)
		}
		if skip.MatchString(name) {
			out = append(out, name)
		} else {
			in = append(in, name)
		}
	}
	if len(in) != 15 || len(out) != 2 || !strings.Contains(out[0], "rolling update") || !strings.Contains(out[1], "rolling update") {
		t.Errorf("fast subset: %d tests, leaving out %q; want 15, leaving out the two rolling updates", len(in), out)
	}
	for _, e := range FastExclusions {
		if e.Reason == "" {
			t.Errorf("exclusion %s: no reason", e.Pattern)
		}
	}
}
