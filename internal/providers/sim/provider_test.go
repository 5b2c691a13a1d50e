package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/pkg/provider"
)

func start(t *testing.T) (*simcloud.Cloud, *Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := simcloud.New("r1", "z1")
	url, err := c.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return c, connect(t, url, 2)
}

// connect is a provider of the cloud at url.
func connect(t *testing.T, url string, retries int) *Provider {
	t.Helper()
	p, err := New(strings.NewReader(fmt.Sprintf("endpoint: %s\nrequestTimeout: 1s\nretries: %d", url, retries)))
	if err != nil {
		t.Fatal(err)
	}
	return p.(*Provider)
}

func nodeNamed(name, providerID string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
}

func TestInstancesV2(t *testing.T) {
	c, p := start(t)
	ctx := context.Background()
	running, _ := c.Create(simcloud.CreateRequest{Name: "running"})
	stopped, _ := c.Create(simcloud.CreateRequest{Name: "stopped"})
	gone, _ := c.Create(simcloud.CreateRequest{Name: "gone"})
	if _, err := c.SetState(stopped.ID, simcloud.StateStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetState(gone.ID, simcloud.StateTerminated); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name                    string
		node                    *corev1.Node
		exists, shutdown        bool
		metadataErr             error
		wantProviderID, wantZon string
	}{
		{name: "by name", node: nodeNamed("running", ""), exists: true, wantProviderID: "sim://" + running.ID, wantZon: "z1"},
		{name: "by providerID", node: nodeNamed("renamed", "sim://"+running.ID), exists: true, wantProviderID: "sim://" + running.ID, wantZon: "z1"},
		{name: "stopped", node: nodeNamed("stopped", ""), exists: true, shutdown: true, wantProviderID: "sim://" + stopped.ID, wantZon: "z1"},
		{name: "terminated does not exist", node: nodeNamed("gone", ""), metadataErr: cloudprovider.InstanceNotFound},
		{name: "unknown does not exist", node: nodeNamed("nobody", ""), metadataErr: cloudprovider.InstanceNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exists, err := p.InstanceExists(ctx, tc.node)
			if err != nil || exists != tc.exists {
				t.Errorf("InstanceExists = %t, %v; want %t", exists, err, tc.exists)
			}
			shutdown, err := p.InstanceShutdown(ctx, tc.node)
			if err != nil || shutdown != tc.shutdown {
				t.Errorf("InstanceShutdown = %t, %v; want %t", shutdown, err, tc.shutdown)
			}
			md, err := p.InstanceMetadata(ctx, tc.node)
			if !errors.Is(err, tc.metadataErr) {
				t.Fatalf("InstanceMetadata err = %v, want %v", err, tc.metadataErr)
			}
			if err == nil && (md.ProviderID != tc.wantProviderID || md.Zone != tc.wantZon || md.Region != "r1" || len(md.NodeAddresses) != 4) {
				t.Errorf("metadata = %+v", md)
			}
			// The batch call agrees with the single calls.
			st, err := p.InstancesStatus(ctx, []*corev1.Node{tc.node})
			if err != nil || st[0].Exists != tc.exists || st[0].Shutdown != tc.shutdown {
				t.Errorf("InstancesStatus = %+v, %v", st, err)
			}
		})
	}
	if _, err := p.InstanceExists(ctx, nodeNamed("x", "aws:///zone/i-1")); err == nil {
		t.Error("a foreign providerID was not an error")
	}
}

func TestThrottleIsReportedNotRetried(t *testing.T) {
	c, p := start(t)
	if _, err := c.Create(simcloud.CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	c.SetSettings(simcloud.Settings{RateLimit: 0.001, RateBurst: 1})
	ctx := context.Background()
	_, _ = p.InstanceExists(ctx, nodeNamed("a", "")) // spends the token
	c.ResetCalls()
	_, err := p.InstanceExists(ctx, nodeNamed("a", ""))
	if _, ok := provider.RetryAfter(err); !ok {
		t.Fatalf("err = %v, want one the cloud-call layer reads as throttling", err)
	}
	if n := c.Calls().Total; n != 1 {
		t.Errorf("a 429 was retried by the provider (%d calls); the layer decides when to retry", n)
	}
}

func TestServerErrorsAreRetried(t *testing.T) {
	c, p := start(t)
	if _, err := c.Create(simcloud.CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	c.SetSettings(simcloud.Settings{ErrorRate: 1})
	_, err := p.InstanceExists(context.Background(), nodeNamed("a", ""))
	if err == nil {
		t.Fatal("no error from a cloud failing every call")
	}
	if n := c.Calls().Total; n != 3 {
		t.Errorf("%d calls, want 1 + 2 retries", n)
	}
}
