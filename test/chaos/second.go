package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/outrigger-ccm/outrigger/internal/dev/apiserver"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// secondCallerPrefix starts the caller name of every replica of the second
// cluster's Outrigger (Config.SecondCluster). It does not start with
// callerPrefix: those are the first cluster's.
const secondCallerPrefix = "second-" + callerPrefix

// secondNodePrefix starts the name of the second cluster's instances and
// Nodes: the cloud and the routes know a node by its name, so the clusters'
// names differ. Its Services have the first cluster's names.
const secondNodePrefix = "chaos2-node-"

// secondClusterCIDR is the second cluster's --cluster-cidr: inside the first
// cluster's 198.18.0.0/16, as test/shared's two clusters share one.
const secondClusterCIDR = "198.18.64.0/18"

// secondMaxNodes bounds the second cluster's nodes: its /18 holds 64 /24s.
const secondMaxNodes = 48

// secondCluster is the other cluster on the cloud account
// (Config.SecondCluster): its control plane, its ID and its workload's
// state.
type secondCluster struct {
	cp      *apiserver.ControlPlane
	client  kubernetes.Interface
	kubecfg string
	// id is its cluster ID, the kube-system namespace's UID.
	id string
	// nodes and services0 are its Nodes and Services at the start.
	nodes, services0 int

	mu       sync.Mutex
	services []string // created and not deleted, in creation order
	nextNode int
	nextSvc  int
}

// instancesNamed is the part of the cloud one cluster's kubelets see: the
// instances whose name starts with prefix.
type instancesNamed struct {
	cloud  *simcloud.Cloud
	prefix string
}

func (l instancesNamed) List() []simcloud.Instance {
	return slices.DeleteFunc(l.cloud.List(), func(in simcloud.Instance) bool { return !strings.HasPrefix(in.Name, l.prefix) })
}

// setUpSecond starts the second cluster's control plane and creates its
// first nodes and Services: a quarter of the first cluster's, at least 2.
func (h *harness) setUpSecond(ctx context.Context) error {
	sc := &secondCluster{kubecfg: filepath.Join(h.dir, "kubeconfig-second"),
		nodes: max(2, h.cfg.Nodes/4), services0: max(2, h.cfg.Services/4)}
	var err error
	if sc.cp, sc.client, sc.id, err = startControlPlane(ctx, sc.kubecfg); err != nil {
		return err
	}
	h.mu.Lock()
	h.second = sc
	h.mu.Unlock()
	if sc.id == h.id {
		return fmt.Errorf("both clusters have ID %s", sc.id)
	}
	if _, err := sc.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	for range sc.nodes {
		if err := h.joinSecondNode(); err != nil {
			return fmt.Errorf("initial node: %w", err)
		}
	}
	for i := range sc.services0 {
		if err := h.createSecondService(ctx, uint32(i)*2654435761); err != nil {
			return fmt.Errorf("initial Service: %w", err)
		}
	}
	h.report.secondClusterUp(sc.id, h.id, sc.nodes, sc.services0)
	return nil
}

func (h *harness) runSecondWorkload(ctx context.Context, steps []Step) {
	for _, s := range steps {
		if !h.at(ctx, s.At) {
			return
		}
		err := h.doSecond(ctx, s)
		h.report.secondWorkload(s.Kind, err)
		if err != nil {
			h.logf("second cluster: workload %s: %v", s.Kind, err)
		}
	}
}

// doSecond runs one step of the second cluster's workload.
func (h *harness) doSecond(ctx context.Context, s Step) error {
	sc := h.second
	switch s.Kind {
	case NodeJoin:
		if len(h.liveInstances(secondNodePrefix)) >= secondMaxNodes {
			return nil
		}
		return h.joinSecondNode()
	case NodeRemove:
		nodes := h.liveInstances(secondNodePrefix)
		if len(nodes) <= 1 {
			return nil
		}
		_, err := h.cloud.SetState(nodes[int(s.Pick)%len(nodes)].ID, simcloud.StateTerminated)
		return err
	case ServiceCreate:
		return h.createSecondService(ctx, s.Pick)
	case ServiceDelete, ServicePorts:
		sc.mu.Lock()
		if len(sc.services) == 0 {
			sc.mu.Unlock()
			return nil
		}
		name := sc.services[int(s.Pick)%len(sc.services)]
		if s.Kind == ServiceDelete {
			sc.services = slices.DeleteFunc(sc.services, func(n string) bool { return n == name })
		}
		sc.mu.Unlock()
		if s.Kind == ServiceDelete {
			return sc.client.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := sc.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mutate(svc, s.Kind, s.Pick)
			_, err = sc.client.CoreV1().Services(namespace).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
	}
	return fmt.Errorf("unknown workload step %q of the second cluster", s.Kind)
}

func (h *harness) joinSecondNode() error {
	sc := h.second
	sc.mu.Lock()
	sc.nextNode++
	name := fmt.Sprintf("%s%d", secondNodePrefix, sc.nextNode)
	sc.mu.Unlock()
	_, err := h.cloud.Create(simcloud.CreateRequest{Name: name})
	return err
}

// createSecondService creates a LoadBalancer Service without a class in the
// second cluster, named as the first cluster's are: the same namespace and
// names in both clusters, as two copies of one application would have.
func (h *harness) createSecondService(ctx context.Context, pick uint32) error {
	sc := h.second
	sc.mu.Lock()
	sc.nextSvc++
	name := fmt.Sprintf("svc-%d", sc.nextSvc)
	sc.mu.Unlock()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
			Ports:    ports(pick),
		},
	}
	if _, err := sc.client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	sc.mu.Lock()
	sc.services = append(sc.services, name)
	sc.mu.Unlock()
	return nil
}

// clusterIDs are the first and the second cluster's IDs, once known.
func (h *harness) clusterIDs() (first, second string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.second != nil {
		second = h.second.id
	}
	return h.id, second
}

// callerCluster is the ID of the cluster whose replica caller is; ok is
// false for a call that is no replica's (the harness, the kubelet
// simulators) or while the IDs are not known.
func (h *harness) callerCluster(caller string) (id string, ok bool) {
	first, second := h.clusterIDs()
	switch {
	case strings.HasPrefix(caller, secondCallerPrefix):
		id = second
	case strings.HasPrefix(caller, callerPrefix):
		id = first
	}
	return id, id != ""
}

// ownsTags tells whether a cloud object's tags make it the first cluster's
// (first) or the second's, in a run with a second cluster: the second's
// carry its ID; anything else, untagged too, is the first's to account
// for. Without a second cluster every object is the first's.
func (h *harness) ownsTags(first bool, tags map[string]string) bool {
	_, second := h.clusterIDs()
	if second == "" {
		return first
	}
	return (tags[sim.TagClusterID] == second) != first
}

// cloudObject names the load balancer or route a request creates, changes
// or deletes, and reads a route's name from the creation's body (restored
// for the handler).
func cloudObject(r *http.Request) (kind, name string, ok bool) {
	if rest, found := strings.CutPrefix(r.URL.Path, "/v1/loadbalancers/"); found && (r.Method == http.MethodPut || r.Method == http.MethodDelete) {
		name, _, _ = strings.Cut(rest, "/")
		return "loadbalancer", name, name != ""
	}
	if name, found := strings.CutPrefix(r.URL.Path, "/v1/routes/"); found && r.Method == http.MethodDelete {
		return "route", name, name != ""
	}
	if r.URL.Path == "/v1/routes" && r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var route simcloud.Route
		if err != nil || json.Unmarshal(body, &route) != nil {
			return "", "", false
		}
		return "route", route.Name, route.Name != ""
	}
	return "", "", false
}

// ownerTags are the tags of the cloud's load balancer or route of name.
func (h *harness) ownerTags(kind, name string) (map[string]string, bool) {
	if kind == "loadbalancer" {
		lb, ok := h.cloud.GetLoadBalancer(name)
		return lb.Tags, ok
	}
	for _, r := range h.cloud.Routes() {
		if r.Name == name {
			return r.Tags, true
		}
	}
	return nil, false
}

// auditClusters checks, as the cloud answers them, the changes the
// replicas of the two clusters of a run with a second cluster
// (Config.SecondCluster) make to load balancers and routes: a replica that
// created or changed one whose cluster-id tag is the other cluster's wrote
// to the other's (CrossClusterWrite); one that deleted it, deleted the
// other's (CrossClusterDelete). Both clusters have the same name: the ID
// is all that tells them apart. Calls the cloud refused changed nothing
// and are not looked at.
func (h *harness) auditClusters(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := r.Header.Get(simcloud.CallerHeader)
		mine, replica := h.callerCluster(caller)
		if !replica || r.Header.Get(simcloud.AdminHeader) != "" {
			next.ServeHTTP(w, r)
			return
		}
		kind, name, change := cloudObject(r)
		if !change {
			next.ServeHTTP(w, r)
			return
		}
		// An object's cluster-id tag is what it was before the call, or
		// what the call created it with.
		tags, existed := h.ownerTags(kind, name)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status/100 != 2 {
			return
		}
		if !existed {
			if tags, existed = h.ownerTags(kind, name); !existed {
				return
			}
		}
		owner := tags[sim.TagClusterID]
		if owner == "" || owner == mine {
			return
		}
		inv := CrossClusterWrite
		if r.Method == http.MethodDelete {
			inv = CrossClusterDelete
		}
		what := fmt.Sprintf("%s %s by %s (cluster %s) of %s %s of %s, tagged cluster-id %s",
			r.Method, r.URL.Path, caller, mine, kind, name, tags[sim.TagService], owner)
		h.violate(inv, kind+"/"+name, what)
		h.logf("VIOLATION %s: %s", inv, what)
	})
}

// secondFinal counts what the second cluster ends with.
func (h *harness) secondFinal(ctx context.Context) SecondFinal {
	sc := h.second
	f := SecondFinal{Instances: len(h.liveInstances(secondNodePrefix))}
	if l, err := sc.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		f.Nodes = len(l.Items)
	}
	if l, err := sc.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range l.Items {
			if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass == nil {
				f.LoadBalancerServices++
			}
		}
	}
	for _, lb := range h.cloud.LoadBalancers() {
		if h.ownsTags(false, lb.Tags) {
			f.LoadBalancers++
		}
	}
	for _, r := range h.cloud.Routes() {
		if h.ownsTags(false, r.Tags) {
			f.Routes++
		}
	}
	return f
}
