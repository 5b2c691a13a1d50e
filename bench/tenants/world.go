package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/outrigger-ccm/outrigger/bench/internal/benchenv"
	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/tenants"
)

// tenantsNamespace holds, in the management cluster, the tenants' Secrets
// and Leases.
const tenantsNamespace = "outrigger-tenants"

// world is one tenant count's clusters: a management cluster and a control
// plane (etcd, kube-apiserver) per tenant, one more than the count (the
// tenant that joins later). Every CCM measured at that count runs on the
// same clusters, emptied between them.
type world struct {
	dir     string
	mgmt    *cluster
	tenants []*cluster
}

// cluster is one control plane and what the benchmark watches in it.
type cluster struct {
	name       string
	cp         *apiserver.ControlPlane
	client     kubernetes.Interface
	kubeconfig string
	stopWatch  func()

	mu          sync.Mutex
	initialized map[string]bool
	ingress     map[string]bool
}

// startWorld starts the management cluster and n tenant clusters, one
// after the other (a 2-core machine starts them no faster at once).
func startWorld(ctx context.Context, n int) (*world, error) {
	w := &world{}
	var err error
	if w.dir, err = os.MkdirTemp("", "outrigger-bench-tenants-"); err != nil {
		return nil, err
	}
	if w.mgmt, err = startCluster(ctx, w.dir, "management"); err != nil {
		w.close()
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantsNamespace}}
	if _, err := w.mgmt.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		w.close()
		return nil, err
	}
	for i := range n {
		progress("starting tenant cluster %d of %d", i+1, n)
		c, err := startCluster(ctx, w.dir, tenantName(i))
		if err != nil {
			w.close()
			return nil, err
		}
		w.tenants = append(w.tenants, c)
	}
	return w, nil
}

func tenantName(i int) string { return fmt.Sprintf("tenant-%d", i+1) }

func startCluster(ctx context.Context, dir, name string) (*cluster, error) {
	cp, err := apiserver.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &cluster{name: name, cp: cp, kubeconfig: filepath.Join(dir, name+".kubeconfig"),
		initialized: map[string]bool{}, ingress: map[string]bool{}}
	admin := *cp.Config
	admin.QPS, admin.Burst = 1000, 1000
	c.client = kubernetes.NewForConfigOrDie(&admin)
	if err := cp.WriteAdminKubeconfig(c.kubeconfig); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	if err := c.watch(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return c, nil
}

// watch keeps, from watches, which nodes are initialized and which
// Services have an ingress point.
func (c *cluster) watch(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	services := factory.Core().V1().Services().Informer()
	onNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			c.mu.Lock()
			c.initialized[n.Name] = benchenv.Initialized(n, false)
			c.mu.Unlock()
		}
	}
	onService := func(obj any) {
		if s, ok := obj.(*corev1.Service); ok {
			c.mu.Lock()
			c.ingress[s.Name] = len(s.Status.LoadBalancer.Ingress) > 0
			c.mu.Unlock()
		}
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNode, UpdateFunc: func(_, o any) { onNode(o) }}); err != nil {
		return err
	}
	if _, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onService, UpdateFunc: func(_, o any) { onService(o) }}); err != nil {
		return err
	}
	stop := make(chan struct{})
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, services.HasSynced) {
		close(stop)
		return errors.New("informers did not sync")
	}
	c.stopWatch = func() { close(stop); factory.Shutdown() }
	return nil
}

// served counts the nodes of names that are initialized and the Services
// of services that have an ingress point.
func (c *cluster) served(names, services []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, name := range names {
		if c.initialized[name] {
			n++
		}
	}
	for _, s := range services {
		if c.ingress[s] {
			n++
		}
	}
	return n
}

// empty deletes the cluster's nodes and Services, the latter without
// waiting for a CCM to remove its finalizer (the load balancers are in the
// run's own sim cloud, stopped with it).
func (c *cluster) empty(ctx context.Context) error {
	if err := c.client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("%s: deleting nodes: %w", c.name, err)
	}
	list, err := c.client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, s := range list.Items {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		if len(s.Finalizers) > 0 {
			if _, err := c.client.CoreV1().Services("default").Patch(ctx, s.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if err := c.client.CoreV1().Services("default").Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	c.mu.Lock()
	clear(c.initialized)
	clear(c.ingress)
	c.mu.Unlock()
	return nil
}

// reset empties every tenant cluster and the management cluster's tenant
// Secrets and Leases.
func (w *world) reset(ctx context.Context) error {
	for _, c := range w.tenants {
		if err := c.empty(ctx); err != nil {
			return err
		}
	}
	m := w.mgmt.client
	if err := m.CoreV1().Secrets(tenantsNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: benchLabel}); err != nil {
		return err
	}
	return m.CoordinationV1().Leases(tenantsNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: tenants.LabelLease})
}

// benchLabel selects the tenants' Secrets.
const benchLabel = "outrigger.dev/bench-tenant"

// putSecret names tenant c to Outrigger: its kubeconfig, its
// cloud-config, and the account all tenants share.
func (w *world) putSecret(ctx context.Context, c *cluster, cloudConfig []byte) error {
	kc, err := os.ReadFile(c.kubeconfig)
	if err != nil {
		return err
	}
	return w.putSecretData(ctx, c, kc, cloudConfig)
}

// putSecretData names tenant c with the kubeconfig kc.
func (w *world) putSecretData(ctx context.Context, c *cluster, kc, cloudConfig []byte) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenantsNamespace, Name: c.name, Labels: map[string]string{benchLabel: "true"}},
		Data: map[string][]byte{
			tenants.KeyKubeconfig:  kc,
			tenants.KeyCloudConfig: cloudConfig,
			tenants.KeyAccount:     []byte("bench"),
		},
	}
	_, err := w.mgmt.client.CoreV1().Secrets(tenantsNamespace).Create(ctx, s, metav1.CreateOptions{})
	return err
}

// holders maps each replica to the tenants whose Leases it holds.
func (w *world) holders(ctx context.Context) (map[string][]string, error) {
	list, err := w.mgmt.client.CoordinationV1().Leases(tenantsNamespace).List(ctx, metav1.ListOptions{LabelSelector: tenants.LabelLease + "=tenant"})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			out[*l.Spec.HolderIdentity] = append(out[*l.Spec.HolderIdentity], l.Annotations[tenants.AnnotationTenant])
		}
	}
	return out, nil
}

func (w *world) close() {
	for _, c := range append([]*cluster{w.mgmt}, w.tenants...) {
		if c == nil {
			continue
		}
		if c.stopWatch != nil {
			c.stopWatch()
		}
		if err := c.cp.Stop(); err != nil {
			progress("stopping %s: %v", c.name, err)
		}
	}
	os.RemoveAll(w.dir)
}
