package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/providermain"
)

// TestAWSOwnMain builds cloud-provider-aws's own main.go with only the app
// import changed and runs it, as its manifests do, with
// --controllers=*,tagging against the sim cloud's EC2 and ELB APIs: nodes
// are initialized by Outrigger's node controller, AWS's tagging controller
// (a controller of its own, with its own flags) tags their instances and
// labels the nodes, a LoadBalancer Service gets a classic ELB from AWS's own
// load balancer code, and AWS's metrics are on Outrigger's /metrics.
func TestAWSOwnMain(t *testing.T) {
	// The AWS cloud-controller-manager's own main, from the module cache;
	// only its import of upstream's app package changes.
	bin := providermain.Build(t, providermain.Main{Module: "k8s.io/cloud-provider-aws",
		File: "cmd/aws-cloud-controller-manager/main.go", GoModDir: ".", Name: "example.com/awsmain"})

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

	cloud, aws, simURL, instances := startCloud(t)
	useSimAWS(t, simURL) // for the CCM's process too
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.conf")
	if err := os.WriteFile(cfg, []byte(cloudConfig(simURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, in := range instances {
		registerNode(t, in.Name)
	}
	port := freeport.Get(t)
	providermain.Run(t, bin, "--cloud-provider=aws", "--cloud-config="+cfg, "--kubeconfig="+kubeconfig,
		"--controllers=*,tagging", "--tags=team=outrigger", "--resources=instance",
		"--leader-elect-resource-name=aws-own-main", "--configure-cloud-routes=false",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--disable-metrics-authentication")

	for _, in := range instances {
		poll.Until(t, 90*time.Second, "node "+in.Name+" initialized, its instance tagged and the node labelled", func() bool {
			n := getNode(t, in.Name)
			inst, _ := cloud.Get(in.ID)
			return n.Spec.ProviderID == "aws:///"+in.Zone+"/"+in.ID &&
				!hasTaint(n, cloudproviderapi.TaintExternalCloudProvider) &&
				inst.Labels["team"] == "outrigger" &&
				n.Labels["k8s.io/cloud-provider-aws"] != ""
		})
	}
	serviceGetsClassicELB(t, cloud, aws, instances)

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
