package benchenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
)

// WriteOnly stands in for a CCM to measure the API server's write limit on
// this machine: it makes the two writes that initialize every node, the
// status patch with the addresses and the patch that sets the provider ID
// and a label and removes the taint, 256 nodes at a time and with no
// client-side rate limit. No CCM can initialize nodes faster on the same
// API server; done receives nil once ctx ends, or the first write error.
func WriteOnly(ctx context.Context, kubeconfig string) (<-chan error, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		errs := make(chan error, 1)
		workqueue.ParallelizeUntil(ctx, 256, len(nodes.Items), func(i int) {
			if err := initialize(ctx, client, &nodes.Items[i], i); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
		select {
		case err := <-errs:
			done <- err
		case <-ctx.Done():
			done <- nil
		}
	}()
	return done, nil
}

func initialize(ctx context.Context, client kubernetes.Interface, node *corev1.Node, i int) error {
	status := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":"198.18.%d.%d"},{"type":"Hostname","address":%q}]}}`, 1+i/250, 1+i%250, node.Name)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching %s's addresses: %w", node.Name, err)
	}
	spec := fmt.Sprintf(`{"metadata":{"labels":{"node.kubernetes.io/instance-type":"bench"}},"spec":{"providerID":"sim://%s","taints":null}}`, node.Name)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(spec), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("initializing %s: %w", node.Name, err)
	}
	return nil
}
