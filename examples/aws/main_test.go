package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/dev/kubeletsim"
	"github.com/outrigger-ccm/outrigger/internal/freeport"
	"github.com/outrigger-ccm/outrigger/internal/manager"
	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/awsemu"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

var (
	kubeconfig string
	client     kubernetes.Interface
)

// TestMain starts a real etcd and kube-apiserver for the package (the root
// module's internal/testenv does the same; it is not importable from here).
func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.NewKlogr())
	os.Exit(run(m))
}

func run(m *testing.M) int {
	cp, err := apiserver.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		return 1
	}
	defer func() { _ = cp.Stop() }()
	dir, err := os.MkdirTemp("", "outrigger-aws-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client = kubernetes.NewForConfigOrDie(cp.Config)
	return m.Run()
}

// clusterID tags the cluster's instances, as the AWS provider expects.
const clusterID = "outrigger-aws"

// awsInstance is an instance as an EC2 user would create it: the private DNS
// name is the one EC2 derives from the private IPv4.
func awsInstance(ip, zone, instanceType string) simcloud.CreateRequest {
	dns := "ip-" + strings.ReplaceAll(ip, ".", "-") + ".ec2.internal"
	return simcloud.CreateRequest{
		Name: dns, Type: instanceType, Zone: zone,
		Labels: map[string]string{"kubernetes.io/cluster/" + clusterID: "owned"},
		Addresses: []simcloud.Address{
			{Type: "InternalIP", Address: ip},
			{Type: "InternalDNS", Address: dns},
		},
	}
}

// startCloud serves a sim cloud in us-east-1, with the AWS APIs over it,
// with the instance the CCM runs on (the metadata service's) and three
// workers, one per zone.
func startCloud(t *testing.T) (*simcloud.Cloud, *awsemu.AWS, string, []simcloud.Instance) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cloud := simcloud.New("us-east-1", "us-east-1a", "us-east-1b", "us-east-1c")
	aws := awsemu.New(cloud)
	url, err := aws.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ins []simcloud.Instance
	for _, req := range []simcloud.CreateRequest{
		awsInstance("198.18.0.4", "us-east-1a", "m5.large"), // the control plane
		awsInstance("198.18.0.5", "us-east-1a", "m5.large"),
		awsInstance("198.18.0.6", "us-east-1b", "c5.xlarge"),
		awsInstance("198.18.0.7", "us-east-1c", "t3.medium"),
	} {
		in, err := cloud.Create(req)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	if err := aws.SetMetadataInstance(ins[0].ID); err != nil {
		t.Fatal(err)
	}
	return cloud, aws, url, ins
}

// zoneIDs are the zone IDs the sim cloud gives us-east-1's zones, AWS-style.
var zoneIDs = map[string]string{"us-east-1a": "use1-az1", "us-east-1b": "use1-az2", "us-east-1c": "use1-az3"}

// cloudConfig is the AWS provider's own cloud-config, pointing its EC2 and
// classic ELB clients at the sim cloud. The region is left to the instance
// metadata, as on EC2. Service is matched exactly against the AWS SDK v2's
// service IDs, "EC2" and "Elastic Load Balancing": the "ec2" and "elb" of
// older examples match nothing and the real endpoints are used.
func cloudConfig(simURL string) string {
	return `[Global]
KubernetesClusterID = ` + clusterID + `

[ServiceOverride "1"]
Service = EC2
Region = us-east-1
URL = ` + simURL + `/ec2
SigningRegion = us-east-1
SigningName = ec2

[ServiceOverride "2"]
Service = "Elastic Load Balancing"
Region = us-east-1
URL = ` + simURL + `/elb
SigningRegion = us-east-1
SigningName = elasticloadbalancing
`
}

// TestAWSProviderUnchanged runs k8s.io/cloud-provider-aws, as registered by
// main.go, through Outrigger against the sim cloud's EC2 API and metadata
// service: kubelet-registered nodes are initialized with the provider IDs,
// zones, region and instance types the cloud holds; a stopped instance's node
// is tainted as shut down and a terminated instance's node is deleted.
func TestAWSProviderUnchanged(t *testing.T) {
	checkDoc(t)
	cloud, _, simURL, instances := startCloud(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cloud.conf")
	if err := os.WriteFile(cfg, []byte(cloudConfig(simURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	useSimAWS(t, simURL)

	ctx := context.Background()
	for _, in := range instances {
		registerNode(t, in.Name)
	}
	port := freeport.Get(t)
	runOutrigger(t, "--cloud-provider=aws", "--cloud-config="+cfg, "--kubeconfig="+kubeconfig,
		"--controllers=cloud-node-controller,cloud-node-lifecycle-controller",
		"--leader-elect=false", "--node-monitor-period=1s",
		fmt.Sprintf("--secure-port=%d", port), "--bind-address=127.0.0.1", "--disable-metrics-authentication")

	for _, in := range instances {
		wantID := "aws:///" + in.Zone + "/" + in.ID
		var n *corev1.Node
		poll.Until(t, 60*time.Second, "node "+in.Name+" initialized", func() bool {
			n = getNode(t, in.Name)
			return n.Spec.ProviderID != "" && !hasTaint(n, cloudproviderapi.TaintExternalCloudProvider)
		})
		t.Logf("%s: %s %s=%s %s=%s", n.Name, n.Spec.ProviderID, corev1.LabelInstanceTypeStable, n.Labels[corev1.LabelInstanceTypeStable],
			"topology.k8s.aws/zone-id", n.Labels["topology.k8s.aws/zone-id"])
		if n.Spec.ProviderID != wantID {
			t.Errorf("%s: providerID %q, want %q", in.Name, n.Spec.ProviderID, wantID)
		}
		for label, want := range map[string]string{
			corev1.LabelTopologyZone:       in.Zone,
			corev1.LabelTopologyRegion:     "us-east-1",
			corev1.LabelInstanceTypeStable: in.Type,
			"topology.k8s.aws/zone-id":     zoneIDs[in.Zone],
		} {
			if got := n.Labels[label]; got != want {
				t.Errorf("%s: label %s=%q, want %q", in.Name, label, got, want)
			}
		}
		ip := in.Addresses[0].Address
		if !hasAddress(n, corev1.NodeInternalIP, ip) || !hasAddress(n, corev1.NodeInternalDNS, in.Name) || !hasAddress(n, corev1.NodeHostName, in.Name) {
			t.Errorf("%s: addresses %v, want InternalIP %s and InternalDNS/Hostname %s", in.Name, n.Status.Addresses, ip, in.Name)
		}
		if a, _ := netip.ParseAddr(ip); !netip.MustParsePrefix("198.18.0.0/15").Contains(a) {
			t.Fatalf("test instance outside 198.18.0.0/15: %s", ip)
		}
	}

	// Node lifecycle: a stopped instance's NotReady node is tainted as shut
	// down; a terminated one's is deleted.
	stopped, terminated := instances[2], instances[3]
	if _, err := cloud.SetState(stopped.ID, simcloud.StateStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := cloud.SetState(terminated.ID, simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{stopped.Name, terminated.Name} {
		if err := kubeletsim.SetReady(ctx, client, name, false); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 60*time.Second, "stopped instance's node tainted as shut down", func() bool {
		return hasTaint(getNode(t, stopped.Name), cloudproviderapi.TaintNodeShutdown)
	})
	poll.Until(t, 60*time.Second, "terminated instance's node deleted", func() bool {
		_, err := client.CoreV1().Nodes().Get(ctx, terminated.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if n := getNode(t, instances[1].Name); hasTaint(n, cloudproviderapi.TaintNodeShutdown) {
		t.Errorf("running instance's node tainted as shut down")
	}
	// AWS's own metrics (registered in component-base's legacy registry,
	// as for the upstream CCM) are on Outrigger's /metrics.
	metrics := scrape(t, fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
	for _, name := range []string{"cloudprovider_aws_api_request_duration_seconds_count{", "outrigger_cloud_calls_total{"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	calls := cloud.Calls()
	t.Logf("EC2 calls the AWS provider made: %v", calls.ByOp)
	for _, op := range []string{"EC2:DescribeInstances", "EC2:DescribeAvailabilityZones"} {
		if calls.ByOp[op] == 0 {
			t.Errorf("no %s call reached the sim cloud", op)
		}
	}
}

// useSimAWS gives the AWS SDK, in this process and the processes it
// starts, its configuration for the sim cloud until the test ends: static
// credentials and the metadata service's address, and nothing of this
// machine's own (no shared config files, profile, region or role).
func useSimAWS(t *testing.T, simURL string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIASIMCLOUD00000000")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sim-secret")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", simURL)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-aws-config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-aws-credentials"))
	for _, v := range []string{"AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
}

// scrape reads /metrics of Outrigger's secure port (its self-signed
// certificate is not verified: the test reads what it serves, nothing
// secret).
func scrape(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// runOutrigger runs Outrigger in this process with the flags and main.go's
// registry until the test ends.
func runOutrigger(t *testing.T, args ...string) {
	t.Helper()
	runOutriggerWith(t, registry(), args...)
}

// runOutriggerWith runs Outrigger in this process with the flags and reg
// until the test ends.
func runOutriggerWith(t *testing.T, reg *provider.Registry, args ...string) {
	t.Helper()
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet("outrigger", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background()))
	mgr, err := manager.New(ctx, opts, reg)
	if err != nil {
		cancel()
		t.Fatalf("starting Outrigger with the AWS provider: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Outrigger: %v", err)
		}
	})
}

// registerNode creates the node as a kubelet started with
// --cloud-provider=external does: named after the host (the instance's private
// DNS name on EC2), Ready, and tainted until the CCM initializes it.
func registerNode(t *testing.T, name string) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Create(context.Background(), kubeletsim.NewNode(name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Key == key {
			return true
		}
	}
	return false
}

func hasAddress(n *corev1.Node, typ corev1.NodeAddressType, addr string) bool {
	for _, a := range n.Status.Addresses {
		if a.Type == typ && a.Address == addr {
			return true
		}
	}
	return false
}

// checkDoc checks that docs/provider-guide.md shows this main.go, so the
// guide's AWS example is the one built and tested here.
func checkDoc(t *testing.T) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/provider-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "<!-- aws-main:begin -->\n```go\n")
	block, _, ok2 := strings.Cut(block, "```\n<!-- aws-main:end -->")
	if !ok || !ok2 {
		t.Fatal("docs/provider-guide.md has no aws-main block")
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if block != string(src) {
		t.Fatalf("the main.go in docs/provider-guide.md differs from examples/aws/main.go:\n%s", block)
	}
}
