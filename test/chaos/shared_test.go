package chaos

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/outrigger-ccm/outrigger/internal/providers/sim"
	"github.com/outrigger-ccm/outrigger/internal/providers/sim/simcloud"
)

// The audit of a shared run tells each CCM's changes to the other's load
// balancers: writes are violations, deletions too unless the Service no
// longer asks for one; the CCMs' own and the harness's are not looked at.
func TestAuditClasses(t *testing.T) {
	cfg := Config{Shared: true, SharedReplicas: 1, Replicas: 1, Log: io.Discard}
	h := &harness{cfg: cfg, cloud: simcloud.New(""), report: newReport(cfg, Schedule{})}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Service).UID)}, nil
	}})
	h.svcIndex = idx
	service := func(name, uid string, typ corev1.ServiceType, class *string) {
		_ = idx.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)},
			Spec: corev1.ServiceSpec{Type: typ, LoadBalancerClass: class}})
	}
	service("wants", "u-wants", corev1.ServiceTypeLoadBalancer, ptr.To(foreignClass))
	service("left", "u-left", corev1.ServiceTypeClusterIP, nil)
	service("mine", "u-mine", corev1.ServiceTypeLoadBalancer, nil)
	lb := func(name, uid, class string) {
		tags := map[string]string{sim.TagCluster: "kubernetes", sim.TagServiceUID: uid, sim.TagClass: class, sim.TagService: namespace + "/" + name}
		if _, err := h.cloud.PutLoadBalancer(name, simcloud.LoadBalancerSpec{Tags: tags}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lb("wants", "u-wants", foreignClass)
	lb("left", "u-left", foreignClass)
	lb("mine", "u-mine", "")
	lb("theirs", "u-wants", foreignClass)
	srv := httptest.NewServer(h.auditClasses(h.cloud.Handler()))
	defer srv.Close()
	call := func(caller, method, path, body string) {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewBufferString(body))
		if caller != "" {
			req.Header.Set(simcloud.CallerHeader, caller)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	const main, second = callerPrefix + "0-1", sharedCallerPrefix + "0-2"
	call(main, http.MethodPut, "/v1/loadbalancers/mine", `{"listeners":[],"backends":[],"tags":{"load-balancer-class":""}}`)
	call(second, http.MethodPut, "/v1/loadbalancers/wants/backends", `[]`)
	call("", http.MethodDelete, "/v1/loadbalancers/theirs", "")
	call(main, http.MethodGet, "/v1/loadbalancers/wants", "")
	if len(h.report.Violations) != 0 {
		t.Fatalf("own changes, the harness's and reads: %v", h.report.Violations)
	}
	call(main, http.MethodPut, "/v1/loadbalancers/wants/backends", `[]`)
	call(second, http.MethodPut, "/v1/loadbalancers/fresh", `{"listeners":[],"backends":[],"tags":{"load-balancer-class":""}}`)
	call(main, http.MethodDelete, "/v1/loadbalancers/left", "")
	call(main, http.MethodDelete, "/v1/loadbalancers/wants", "")
	got := map[string]string{}
	for _, v := range h.report.Violations {
		got[v.Object] = v.Invariant
	}
	want := map[string]string{"wants": CrossClassDelete, "fresh": CrossClassWrite}
	if len(got) != 2 || got["wants"] != want["wants"] || got["fresh"] != want["fresh"] {
		t.Errorf("violations %v, want %v", got, want)
	}
	// The write to the backends of "wants" is a violation of its own.
	if n := h.report.count(CrossClassWrite); n != 2 {
		t.Errorf("%d %s, want 2 (backends of wants, creation of fresh)", n, CrossClassWrite)
	}
	if n := h.report.Shared.CrossClassCleanups; n != 1 {
		t.Errorf("%d cross-class cleanups, want 1 (left, a ClusterIP Service)", n)
	}
}
