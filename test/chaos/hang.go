package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The object-hang fault (Config.Hang): the cloud never answers calls on
// the load balancers of hangNew Services it creates and of one in hangEvery
// of the Services of Outrigger's class, and answers every other call. It
// also creates hangProbes Services whose load balancers are answered, so
// every such fault measures some. A Service of Outrigger's class created
// during the fault, whose load balancer is answered, must get its ingress
// before the fault lifts if it was created hangGrace before then
// (HangBlocked).
const (
	hangNew    = 3
	hangEvery  = 3
	hangProbes = 2
	hangGrace  = 10 * time.Second
)

// hangWindow is an object-hang fault in progress.
type hangWindow struct {
	start time.Time
	// hung are the Services whose load balancer's calls hang.
	hung map[string]bool
	// created are the other Services of Outrigger's class created during
	// the fault; got when they got their ingress.
	created, got map[string]time.Time
}

// injectObjectHang starts the object-hang fault and returns what lifts it.
// What the API server refuses meanwhile (Services not listed or not
// created) is logged and left out.
func (h *harness) injectObjectHang(ctx context.Context, s Step) (func(context.Context) error, error) {
	list, err := h.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		h.logf("  object hang: listing Services: %v", err)
		list = &corev1.ServiceList{}
	}
	w := &hangWindow{start: time.Now(), hung: map[string]bool{}, created: map[string]time.Time{}, got: map[string]time.Time{}}
	var objects []string
	for _, svc := range list.Items {
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil && svc.DeletionTimestamp == nil && pickOf(s.Pick, svc.Name)%hangEvery == 0 {
			w.hung[svc.Name] = true
			objects = append(objects, "loadbalancer/"+cloudprovider.DefaultLoadBalancerName(&svc))
		}
	}
	// New Services are created without a load balancer, so that theirs
	// (named after their UID) hangs from its first call on.
	var fresh []string
	for range hangNew {
		h.mu.Lock()
		h.nextHang++
		n := h.nextHang
		h.mu.Unlock()
		name := fmt.Sprintf("hang-%d", n)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"app": name}, Ports: ports(s.Pick + uint32(n))},
		}
		created, err := h.client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			h.logf("  object hang: creating Service %s: %v", name, err)
			continue
		}
		fresh = append(fresh, name)
		w.hung[name] = true
		objects = append(objects, "loadbalancer/"+cloudprovider.DefaultLoadBalancerName(created))
	}
	sort.Strings(objects)
	h.cloud.SetSettings(simcloud.Settings{HangObjects: objects})
	h.mu.Lock()
	h.hang = w
	h.mu.Unlock()
	h.logf("  %d Services' load balancers hang (%d new)", len(w.hung), len(fresh))
	for _, name := range fresh {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			svc, err := h.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			_, err = h.client.CoreV1().Services(namespace).Update(ctx, svc, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			h.logf("  object hang: Service %s to type LoadBalancer: %v", name, err)
		}
		h.mu.Lock()
		h.services = append(h.services, name)
		if err == nil {
			h.created[name] = time.Now()
		}
		h.mu.Unlock()
	}
	for i := range hangProbes {
		pick := s.Pick + uint32(i)*2654435761
		if pick%7 == 3 {
			pick++ // of Outrigger's class
		}
		if err := h.createService(ctx, pick); err != nil {
			h.logf("  object hang: creating a Service: %v", err)
		}
	}
	h.report.hangStarted(len(w.hung))
	return func(ctx context.Context) error {
		h.cloud.SetSettings(simcloud.Settings{})
		h.mu.Lock()
		h.hang = nil
		h.mu.Unlock()
		h.endHang(ctx, w, time.Now())
		return nil
	}, nil
}

// pickOf mixes a fault's pick with a name, to choose among objects.
func pickOf(pick uint32, name string) uint32 {
	f := fnv.New32a()
	_, _ = fmt.Fprintf(f, "%d/%s", pick, name)
	return f.Sum32()
}

// hangCreated notes a Service created during an object-hang fault.
// h.mu is held.
func (h *harness) hangCreated(name string, at time.Time) {
	if h.hang != nil && !h.hang.hung[name] {
		h.hang.created[name] = at
	}
}

// hangIngress notes a Service's ingress during an object-hang fault.
func (h *harness) hangIngress(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.hang; w != nil {
		if _, ok := w.created[name]; ok {
			if _, seen := w.got[name]; !seen {
				w.got[name] = time.Now()
			}
		}
	}
}

// endHang judges the Services created during the fault: each must have
// its ingress by the lift, if created hangGrace before it and still
// asking for a load balancer of Outrigger's.
func (h *harness) endHang(ctx context.Context, w *hangWindow, lift time.Time) {
	var res hangResult
	names := make([]string, 0, len(w.created))
	for name := range w.created {
		names = append(names, name)
	}
	slices.Sort(names)
	var times []string
	for _, name := range names {
		created := w.created[name]
		res.created++
		if got, ok := w.got[name]; ok {
			res.ingress = append(res.ingress, got.Sub(created))
			times = append(times, fmt.Sprintf("%s %.2fs", name, got.Sub(created).Seconds()))
			continue
		}
		if lift.Sub(created) < hangGrace {
			res.unjudged++
			continue
		}
		svc, err := h.client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			res.unjudged++ // deleted by the workload meanwhile
			continue
		case err != nil:
			h.logf("  object hang: reading Service %s: %v", name, err)
			res.unjudged++
			continue
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass != nil || svc.DeletionTimestamp != nil {
			res.unjudged++
			continue
		}
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			// Its ingress came while the watch was behind.
			res.ingress = append(res.ingress, lift.Sub(created))
			continue
		}
		h.violate(HangBlocked, namespace+"/"+name, fmt.Sprintf("created %.1fs into the fault, no ingress by its end %.1fs later",
			created.Sub(w.start).Seconds(), lift.Sub(created).Seconds()))
	}
	h.logf("  object hang lifted: %d Services created during it, %d got their load balancer before the lift (%s), %d too late to judge",
		res.created, len(res.ingress), strings.Join(times, ", "), res.unjudged)
	h.report.hangEnded(res)
}

// hangResult is what one object-hang fault measured.
type hangResult struct {
	created, unjudged int
	ingress           []time.Duration
}
