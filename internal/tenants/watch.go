package tenants

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// watchSecrets sends on kick whenever a tenant Secret is added, changed or
// removed, so that a new tenant is served at once rather than at the next
// round (a Period, 2 s by default). The watch only says when: the round
// still lists the Secrets, and no Secret is kept in memory. Without the
// watch verb, or while the watch fails, rounds come every Period as before.
func (r *Reconciler) watchSecrets(ctx context.Context, kick chan<- struct{}) {
	log := klog.FromContext(ctx)
	secrets := r.opts.Client.CoreV1().Secrets(r.opts.Namespace)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: 1 << 30}
	for ctx.Err() == nil {
		// From no resourceVersion: the watch begins with the Secrets that
		// exist, which only costs one round.
		w, err := secrets.Watch(ctx, metav1.ListOptions{LabelSelector: r.opts.Selector.String()})
		if err != nil {
			log.V(2).Info("Watching the tenant Secrets failed; reading them every round only", "err", err)
			if !sleep(ctx, backoff.Step()) {
				return
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break
			}
			select {
			case kick <- struct{}{}:
			default: // a round is due already
			}
		}
		w.Stop()
		// The watch was made: the server ended it (they last minutes), or
		// it broke; make it again soon.
		backoff.Duration = time.Second
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
