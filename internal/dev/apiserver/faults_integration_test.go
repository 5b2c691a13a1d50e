//go:build integration

package apiserver

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The API server comes back from a SIGKILL with what it stored and the
// credentials it had; a paused etcd holds requests up until it continues.
func TestKillRestartAndPause(t *testing.T) {
	ctx := context.Background()
	cp, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 3 * time.Second
	client := kubernetes.NewForConfigOrDie(cfg)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before-the-kill"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for round := range 2 { // the restarted API server can be killed again
		if err := cp.KillAPIServer(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
			t.Fatalf("round %d: the API server answered after SIGKILL", round)
		}
		if err := cp.StartAPIServer(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The kubeconfig written before the kill still works, and the
		// data is there.
		if _, err := client.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("round %d: after the restart: %v", round, err)
		}
	}

	if err := cp.PauseEtcd(); err != nil {
		t.Fatal(err)
	}
	short := rest.CopyConfig(cfg)
	short.Timeout = time.Second
	if _, err := kubernetes.NewForConfigOrDie(short).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "while-paused"}}, metav1.CreateOptions{}); err == nil {
		pid, _ := childPID("etcd")
		t.Fatalf("a write succeeded with etcd (pid %d, state %s) paused", pid, processState(pid))
	}
	if err := cp.ResumeEtcd(); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 100 { // a write the API server accepts again, once etcd answers
		if _, lastErr = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "after-resume"}}, metav1.CreateOptions{}); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("after resuming etcd: %v", lastErr)
	}
}
