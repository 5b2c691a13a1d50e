//go:build integration

package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
	"github.com/outrigger-ccm/outrigger/internal/providertest"
	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

// The client outlives its plugin: crashed, replaced by garbage, restarted,
// it is reached again without being redialled, and in between its errors
// say that the plugin is unreachable.
func TestClientReconnectsToARestartedPlugin(t *testing.T) {
	c := testenv.StartCloud(t)
	if _, err := c.Create(simcloud.CreateRequest{Name: "reconnect-1"}); err != nil {
		t.Fatal(err)
	}
	endpoint, path := socket(t)
	stop := serve(t, endpoint, simProvider(t, c))
	p := dial(t, endpoint)
	inst, _ := p.InstancesV2()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "reconnect-1"}}
	meta := func(timeout time.Duration) (*cloudprovider.InstanceMetadata, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return inst.InstanceMetadata(ctx, node)
	}
	if _, err := meta(5 * time.Second); err != nil {
		t.Fatalf("with the plugin up: %v", err)
	}

	for _, phase := range []struct {
		name string
		down func() (restore func())
	}{
		{"crashed", func() func() { stop(); return func() {} }},
		{"garbage on its socket", func() func() { return providertest.GarbageSocket(t, path) }},
	} {
		restore := phase.down()
		_, err := meta(500 * time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), endpoint) {
			t.Errorf("plugin %s: got %v, want an error naming %s unreachable", phase.name, err, endpoint)
		}
		restore()
	}

	// Restarted (an upgrade): the same client reaches it once its backoff
	// allows, never later than the longest reconnect delay after.
	serve(t, endpoint, simProvider(t, c))
	testenv.Eventually(t, 30*time.Second, "the client to reach the restarted plugin", func() (bool, error) {
		m, err := meta(2 * time.Second)
		return err == nil && m.ProviderID != "", err
	})
}
