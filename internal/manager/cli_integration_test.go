//go:build integration

package manager_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// TestBadInputExitsWithOneClearLine runs the real binary with bad input and
// checks it fails fast, non-zero, with one line naming what to fix.
func TestBadInputExitsWithOneClearLine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "outrigger")
	build := exec.Command("go", "build", "-o", bin, "github.com/outrigger-ccm/outrigger/cmd/outrigger")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building outrigger: %v\n%s", err, out)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "endpoint: http://127.0.0.1:1\n")
	kc := "--kubeconfig=" + testenv.Kubeconfig
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no provider", []string{kc}, "--cloud-provider is required"},
		{"unknown provider", []string{kc, "--cloud-provider=aws"}, `unknown --cloud-provider "aws": this binary has providers grpc, local, sim`},
		{"no cloud-config", []string{kc, "--cloud-provider=sim"}, "needs --cloud-config"},
		{"missing cloud-config", []string{kc, "--cloud-provider=sim", "--cloud-config=" + filepath.Join(dir, "nope.yaml")}, "cannot read --cloud-config"},
		{"malformed cloud-config", []string{kc, "--cloud-provider=sim", "--cloud-config=" + write("bad.yaml", "endpoint: [\n")}, "malformed cloud-config"},
		{"misspelt cloud-config key", []string{kc, "--cloud-provider=sim", "--cloud-config=" + write("typo.yaml", "endpont: http://x\n")}, `unknown field "endpont"`},
		{"bad endpoint", []string{kc, "--cloud-provider=sim", "--cloud-config=" + write("url.yaml", "endpoint: 127.0.0.1:80\n")}, "must be an http:// or https:// URL"},
		{"bad duration flag", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--node-monitor-period=soon"}, `invalid argument "soon" for "--node-monitor-period"`},
		{"unknown flag", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--service-cluster-ip-range=198.19.0.0/24"}, "unknown flag: --service-cluster-ip-range"},
		{"cidrs without cluster-cidr", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--allocate-node-cidrs"}, "--allocate-node-cidrs needs --cluster-cidr"},
		{"two IPv4 cluster CIDRs", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16,198.19.0.0/16"}, "must be one IPv4 and one IPv6"},
		{"cluster CIDR too big for the mask", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/15", "--node-cidr-mask-size-ipv4=32"}, "at most 2^16 are supported"},
		{"bad allocator", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--allocate-node-cidrs", "--cluster-cidr=198.18.0.0/16", "--cidr-allocator-type=IPAMFromCluster"}, `--cidr-allocator-type "IPAMFromCluster"`},
		{"unknown controller", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--controllers=*,-routes"}, `unknown controller "-routes"`},
		{"bad load balancer class", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--load-balancer-class=Not A Class!"}, `--load-balancer-class "Not A Class!"`},
		{"bad leader migration config", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--enable-leader-migration", "--leader-migration-config=" + write("lm.yaml", "kind: LeaderMigrationConfiguration\napiVersion: controllermanager.config.k8s.io/v1\nleaderName: x\nresourceLock: endpoints\n")}, `resourceLock is "endpoints": only leases`},
		{"migration config without migration", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--leader-migration-config=/x.yaml"}, "--leader-migration-config needs --enable-leader-migration"},
		{"zero service workers", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--concurrent-service-syncs=0"}, "--concurrent-service-syncs must be positive"},
		{"zero qps", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--kube-api-qps=0"}, "--kube-api-qps must be positive"},
		{"lease shorter than renew", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--leader-elect-lease-duration=5s"}, "must be greater than --leader-elect-renew-deadline"},
		{"malformed platform", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--cloud-provider-platforms=sim://"}, `--cloud-provider-platforms: "sim://" is not a providerID scheme`},
		{"platform given twice", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--cloud-provider-platforms=sim,sim"}, `--cloud-provider-platforms: "sim" is given twice`},
		{"platform the provider does not serve", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--cloud-provider-platforms=aws"}, `--cloud-provider-platforms names "aws", but provider "sim" serves only the providerID schemes [sim]`},
		{"bad bind address", []string{kc, "--cloud-provider=sim", "--cloud-config=" + good, "--bind-address=localhost"}, `invalid argument "localhost" for "--bind-address" flag`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			// Bad input must stop the command at once; one that runs
			// instead is killed, not left behind.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatal("exited 0")
			}
			out := strings.TrimRight(stderr.String(), "\n")
			if strings.Count(out, "\n") != 0 {
				t.Errorf("want one line on stderr, got:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("stderr %q does not say %q", out, tc.want)
			}
		})
	}
}
