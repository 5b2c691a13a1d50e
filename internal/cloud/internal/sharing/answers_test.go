package sharing

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func answerNode(i int) *corev1.Node {
	name := fmt.Sprintf("node-%05d", i)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: "sim://" + name}}
}

// Answers fresh within the window stay however many there are, and a new
// node's answer does not walk them all each time: the passes over the map
// grow with the log of its size, not with the answers recorded.
func TestAnswersPruneAmortized(t *testing.T) {
	now := time.Now()
	a := NewAnswers(5*time.Second, func() time.Time { return now })
	const fresh = 20000
	a.mu.Lock()
	for i := range fresh {
		a.record(answerNode(i), Exists, true)
	}
	a.mu.Unlock()
	if len(a.byNode) != fresh {
		t.Fatalf("%d answers kept, want all %d (all within the window)", len(a.byNode), fresh)
	}
	if a.prunes > 10 {
		t.Errorf("%d passes over the map for %d new nodes' answers, want at most 10", a.prunes, fresh)
	}

	// Past the window, the next prune drops them.
	now = now.Add(10 * time.Second)
	a.mu.Lock()
	for i := fresh; len(a.byNode) >= fresh; i++ {
		if i > 3*fresh {
			a.mu.Unlock()
			t.Fatalf("%d stale answers still kept after %d new ones", len(a.byNode), i-fresh)
		}
		a.record(answerNode(i), Exists, true)
	}
	a.mu.Unlock()
	if _, ok := a.cached(answerNode(0), Exists); ok {
		t.Error("a stale answer was given")
	}
}
