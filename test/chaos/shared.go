package chaos

import (
	"fmt"
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// sharedCallerPrefix starts the caller name of every replica of the second
// CCM (Config.Shared); callerPrefix, which it extends, Outrigger's.
const sharedCallerPrefix = callerPrefix + "shared-"

// callerClass is the load balancer class the CCM of a caller serves ("" for
// Outrigger's, which serves Services without a class); ok is false for a
// call that is no replica's (the harness, the kubelet simulator).
func callerClass(caller string) (class string, ok bool) {
	switch {
	case strings.HasPrefix(caller, sharedCallerPrefix):
		return foreignClass, true
	case strings.HasPrefix(caller, callerPrefix):
		return "", true
	}
	return "", false
}

// lbChange names the load balancer a request creates, changes or deletes.
func lbChange(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/loadbalancers/")
	if !ok || (r.Method != http.MethodPut && r.Method != http.MethodDelete) {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, name != ""
}

// auditClasses checks, as the cloud answers them, the changes the two CCMs
// of a shared run (Config.Shared) make to load balancers: one that created
// or changed a load balancer tagged with the other's class wrote to the
// other's (CrossClassWrite); one that deleted the other's while its Service
// still asked the other for it deleted it wrongly (CrossClassDelete).
// Deleting the other's load balancer of a Service that no longer asks for
// one (deleted, or no longer of type LoadBalancer: its class is cleared) is
// the cleanup the CCM of Services without a class does, as upstream's:
// counted, not a violation.
func (h *harness) auditClasses(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := r.Header.Get(simcloud.CallerHeader)
		class, replica := callerClass(caller)
		name, change := lbChange(r)
		if !replica || !change || r.Header.Get(simcloud.AdminHeader) != "" {
			next.ServeHTTP(w, r)
			return
		}
		// A load balancer's class tag never changes: the cloud replaces
		// it only for a caller proving the same class. What a call acts
		// on is what was there before it, or what it created.
		before, existed := h.cloud.GetLoadBalancer(name)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.status/100 != 2 {
			return
		}
		lb := before
		if !existed {
			if lb, existed = h.cloud.GetLoadBalancer(name); !existed {
				return
			}
		}
		lbClass := lb.Tags[sim.TagClass]
		if lbClass == class {
			return
		}
		what := fmt.Sprintf("%s %s by %s (class %q) of load balancer %s of %s, tagged class %q",
			r.Method, r.URL.Path, caller, class, name, lb.Tags[sim.TagService], lbClass)
		if r.Method != http.MethodDelete {
			h.violate(CrossClassWrite, name, what)
			h.logf("VIOLATION %s: %s", CrossClassWrite, what)
			return
		}
		state, wants := h.asksFor(lb.Tags[sim.TagServiceUID], lbClass)
		if wants {
			h.violate(CrossClassDelete, name, what+"; the Service "+state)
			h.logf("VIOLATION %s: %s; the Service %s", CrossClassDelete, what, state)
			return
		}
		h.report.crossClassCleanup()
		h.logf("  cross-class cleanup: %s; the Service %s", what, state)
	})
}

// asksFor tells whether the Service of uid, as the harness's watch last saw
// it, asks for a load balancer of class, and describes its state.
func (h *harness) asksFor(uid, class string) (string, bool) {
	h.mu.Lock()
	idx := h.svcIndex
	h.mu.Unlock()
	if idx == nil {
		return "is not watched yet", true
	}
	objs, err := idx.ByIndex(uidIndex, uid)
	if err != nil || len(objs) == 0 {
		return "is gone", false
	}
	svc := objs[0].(*corev1.Service)
	state := fmt.Sprintf("is of type %s, class %q", svc.Spec.Type, ptr.Deref(svc.Spec.LoadBalancerClass, ""))
	if svc.DeletionTimestamp != nil {
		return state + ", being deleted", false
	}
	return state, svc.Spec.Type == corev1.ServiceTypeLoadBalancer && ptr.Deref(svc.Spec.LoadBalancerClass, "") == class
}

// uidIndex indexes the watch's Services by UID.
const uidIndex = "uid"

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}
