//go:build integration

package manager_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
	"github.com/outrigger-ccm/outrigger/pkg/providers/sim/simcloud"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestLeaderElection runs two Outriggers, each with its own cloud holding the
// same instances, so the clouds' call counters show which one is working.
func TestLeaderElection(t *testing.T) {
	clouds := []*testenv.Cloud{testenv.StartCloud(t), testenv.StartCloud(t)}
	addNode := func() string {
		name := testenv.Name("le")
		for _, c := range clouds {
			if _, err := c.Create(simcloud.CreateRequest{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		testenv.CreateNode(t, name, nil)
		return name
	}
	initialized := func(name string) func() (bool, error) {
		return func() (bool, error) { return testenv.GetNode(t, name).Spec.ProviderID != "", nil }
	}
	lease := testenv.Name("outrigger-le")
	flags := []string{"--leader-elect=true", "--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=200ms"}
	instances := []*testenv.Outrigger{testenv.StartOutrigger(t, clouds[0], flags...), testenv.StartOutrigger(t, clouds[1], flags...)}

	first := addNode()
	testenv.Eventually(t, 30*time.Second, "first node initialized", initialized(first))
	time.Sleep(500 * time.Millisecond)
	leader := -1
	for i, c := range clouds {
		if c.Calls().Total > 0 {
			if leader >= 0 {
				t.Fatal("both instances called their cloud: both ran controllers")
			}
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("neither instance called its cloud")
	}
	l, err := testenv.Client.CoordinationV1().Leases("kube-system").Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		t.Fatalf("lease kube-system/%s has no holder: %v", lease, err)
	}

	// The leader stops; the other takes over and initializes the next node.
	instances[leader].Stop()
	follower := 1 - leader
	second := addNode()
	testenv.Eventually(t, 30*time.Second, "second node initialized by the new leader", initialized(second))
	if clouds[follower].Calls().Total == 0 {
		t.Error("the new leader never called its cloud")
	}
}
