package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
)

// awsMain is the AWS cloud-controller-manager's own main, in the module
// cache; only its import of upstream's app package changes.
const (
	awsModule       = "k8s.io/cloud-provider-aws"
	awsMain         = "cmd/aws-cloud-controller-manager/main.go"
	upstreamImport  = `"k8s.io/cloud-provider/app"`
	outriggerImport = `"github.com/outrigger-ccm/outrigger/app"`
)

// TestAWSOwnMain builds cloud-provider-aws's own main.go with only the app
// import changed and runs it, as its manifests do, with
// --controllers=*,tagging against the sim cloud's EC2 API: nodes are
// initialized by Outrigger's node controller, AWS's tagging controller (a
// controller of its own, with its own flags) tags their instances and
// labels the nodes, and AWS's metrics are on Outrigger's /metrics.
func TestAWSOwnMain(t *testing.T) {
	bin := buildAWSMain(t)

	// A flag Outrigger does not know, of the provider's, is in --help in
	// its own section; an unknown controller is one line.
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, help)
	}
	for _, want := range []string{"Tagging controller flags:", "--tags stringToString", "--cloud-provider-platforms", "--load-balancer-class"} {
		if !strings.Contains(string(help), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	// --version names the binary, then Outrigger.
	version, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(version), "example.com/awsmain ") || !strings.Contains(string(version), "\nOutrigger v") {
		t.Errorf("--version: %v\n%s", err, version)
	}
	out, err := exec.Command(bin, "--cloud-provider=aws", "--kubeconfig="+kubeconfig, "--controllers=*,nope").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown controller "nope"`) || !strings.Contains(string(out), "tagging") {
		t.Errorf("--controllers=*,nope: %v, output:\n%s", err, out)
	}

	cloud, simURL, instances := startCloud(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.conf")
	if err := os.WriteFile(cfg, []byte(cloudConfig(simURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range instances {
		registerNode(t, in.Name)
	}
	port := freeport.Get(t)
	logFile, err := os.Create(filepath.Join(dir, "aws-ccm.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--cloud-provider=aws", "--cloud-config="+cfg, "--kubeconfig="+kubeconfig,
		"--controllers=*,tagging", "--tags=team=outrigger", "--resources=instance",
		"--leader-elect-resource-name=aws-own-main", "--configure-cloud-routes=false",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--disable-metrics-authentication")
	cmd.Env = append(awsEnv(os.Environ()),
		"AWS_ACCESS_KEY_ID=AKIASIMCLOUD00000000", "AWS_SECRET_ACCESS_KEY=sim-secret",
		"AWS_EC2_METADATA_SERVICE_ENDPOINT="+simURL,
		"AWS_CONFIG_FILE="+filepath.Join(dir, "no-aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(dir, "no-aws-credentials"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("AWS main's log (last 8000 bytes):\n%s", b)
		}
	})

	for _, in := range instances {
		eventually(t, 90*time.Second, "node "+in.Name+" initialized, its instance tagged and the node labelled", func() bool {
			n := getNode(t, in.Name)
			inst, _ := cloud.Get(in.ID)
			return n.Spec.ProviderID == "aws:///"+in.Zone+"/"+in.ID &&
				!hasTaint(n, cloudproviderapi.TaintExternalCloudProvider) &&
				inst.Labels["team"] == "outrigger" &&
				n.Labels["k8s.io/cloud-provider-aws"] != ""
		})
	}
	metrics := scrape(t, fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
	for _, name := range []string{"cloudprovider_aws_api_request_duration_seconds_count{", "outrigger_cloud_calls_total{"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if calls := cloud.Calls(); calls.ByOp["EC2:CreateTags"] == 0 {
		t.Errorf("no CreateTags call reached the sim cloud: %v", calls.ByOp)
	}
}

// awsEnv is env without the AWS settings of this machine.
func awsEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AWS_") {
			out = append(out, kv)
		}
	}
	return out
}

// buildAWSMain writes the AWS main, import changed, into a module that is
// this one under another name (the same versions of everything), and
// builds it.
func buildAWSMain(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	here := filepath.Dir(self)
	modDir := goOutput(t, here, "list", "-m", "-f", "{{.Dir}}", awsModule)
	src, err := os.ReadFile(filepath.Join(modDir, awsMain))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), upstreamImport); n != 1 {
		t.Fatalf("%s imports %s %d times, want once", awsMain, upstreamImport, n)
	}
	gomod, err := os.ReadFile(filepath.Join(here, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(here, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(here))
	mod := strings.Replace(string(gomod), "module github.com/outrigger-ccm/outrigger/examples/aws", "module example.com/awsmain", 1)
	mod = strings.Replace(mod, "github.com/outrigger-ccm/outrigger => ../..", "github.com/outrigger-ccm/outrigger => "+root, 1)
	dir := t.TempDir()
	for name, text := range map[string]string{
		"main.go": strings.Replace(string(src), upstreamImport, outriggerImport, 1),
		"go.mod":  mod,
		"go.sum":  string(sum),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "aws-cloud-controller-manager")
	goOutput(t, dir, "build", "-mod=mod", "-o", bin, ".")
	return bin
}

func goOutput(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
