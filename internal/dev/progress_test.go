package dev

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/outrigger-ccm/outrigger/internal/testenv"
)

func makeNode(name, providerID string, taints ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

// A node counts as initialized once Outrigger gave it a providerID and
// removed the uninitialized taint, not before; other taints do not matter.
func TestCountNodesCountsInitializedOnesApart(t *testing.T) {
	uninitialized := cloudproviderapi.TaintExternalCloudProvider
	cases := []struct {
		name  string
		nodes []corev1.Node
		want  nodeCount
	}{
		{"none registered yet", nil, nodeCount{}},
		{"registered, not initialized", []corev1.Node{makeNode("node-1", "", uninitialized), makeNode("node-2", "", uninitialized)}, nodeCount{Registered: 2}},
		{"a providerID, the taint still on", []corev1.Node{makeNode("node-1", "sim://i-00000001", uninitialized)}, nodeCount{Registered: 1}},
		{"initialized, another taint on", []corev1.Node{makeNode("node-1", "sim://i-00000001", "node.kubernetes.io/not-ready"), makeNode("node-2", "", uninitialized)}, nodeCount{Registered: 2, Initialized: 1}},
		{"all initialized", []corev1.Node{makeNode("node-1", "sim://i-00000001"), makeNode("node-2", "sim://i-00000002")}, nodeCount{Registered: 2, Initialized: 2}},
	}
	for _, tc := range cases {
		if got := countNodes(tc.nodes); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// While nodes register and get initialized, a line reports how far they
// are; the last says they are all initialized, and Run returns.
func TestNodeProgressReportsUntilAllAreInitialized(t *testing.T) {
	registered := makeNode("node-1", "", cloudproviderapi.TaintExternalCloudProvider)
	client := fake.NewClientset(&registered)
	var out syncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		nodeProgress{Client: client, Out: &out, Want: 2, Poll: time.Millisecond, Every: time.Millisecond}.Run(context.Background())
	}()
	testenv.Eventually(t, time.Minute, "a line of one node registered", func() (bool, error) {
		return strings.Contains(out.String(), "Nodes: 1 of 2 registered, 0 initialized"), nil
	})
	for _, n := range []corev1.Node{makeNode("node-1", "sim://i-00000001"), makeNode("node-2", "sim://i-00000002")} {
		if _, err := client.CoreV1().Nodes().Update(context.Background(), &n, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = client.CoreV1().Nodes().Create(context.Background(), &n, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	<-done
	got := out.String()
	want := regexp.MustCompile(`^Waiting for 2 nodes to register and Outrigger to initialize them\.\.\.
(Nodes: [0-9] of 2 registered, [0-9] initialized \([0-9.]+ s\)
)+2 of 2 nodes registered and initialized by Outrigger in [0-9.]+ s: ready to use\.
$`)
	if !want.MatchString(got) {
		t.Errorf("output:\n%s\nwant it to match\n%s", got, want)
	}
}

// syncBuffer is a bytes.Buffer that Run writes to while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
