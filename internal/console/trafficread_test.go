package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/outrigger-ccm/outrigger/internal/controllers/gateway"
)

const dpNamespace = "outrigger-gateways"

// dataPlanePod is a data plane pod of the Gateway with uid, as the
// gateway controller labels them.
func dataPlanePod(uid, name string, ready bool) *corev1.Pod {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dpNamespace, Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{managedByLabel: "outrigger", gateway.GatewayUIDLabel: uid}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// proxied is what a fake pod proxy answers.
type proxied struct {
	data []byte
	err  error
}

func (p proxied) DoRaw(context.Context) ([]byte, error) { return p.data, p.err }
func (p proxied) Stream(context.Context) (io.ReadCloser, error) {
	if p.err != nil {
		return nil, p.err
	}
	return io.NopCloser(bytes.NewReader(p.data)), nil
}

// proxyPods makes client's pod proxy answer with answer(pod), recording
// what was asked.
func proxyPods(client *fake.Clientset, answer func(pod string) proxied) *[]k8stesting.ProxyGetAction {
	var mu sync.Mutex
	var asked []k8stesting.ProxyGetAction
	client.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		pa := a.(k8stesting.ProxyGetAction)
		mu.Lock()
		asked = append(asked, pa)
		mu.Unlock()
		return true, answer(pa.GetName()), nil
	})
	return &asked
}

// testReader is a trafficReader of client on a fake clock, counting the
// reads that ended.
func testReader(t *testing.T, client *fake.Clientset) (*trafficReader, *clocktesting.FakeClock, *atomic.Int32) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var ended atomic.Int32
	r := newTrafficReader(ctx, client, clk, logr.Discard(), func() { ended.Add(1) })
	t.Cleanup(func() { cancel(); r.reads.Wait() })
	return r, clk, &ended
}

func shownGateway(uid string) Gateway {
	return Gateway{Namespace: "default", Name: uid, Outrigger: true, uid: uid, dataPlaneNamespace: dpNamespace,
		Listeners: []Listener{{Name: "http", Protocol: "HTTP", Port: 80}}}
}

// attachNow attaches r's figures to the Gateways, after the reads that
// attaching starts have ended.
func attachNow(r *trafficReader, gws ...Gateway) []Gateway {
	r.attach(gws)
	r.reads.Wait()
	r.attach(gws)
	return gws
}

// The figures come through the API server's pod proxy on the data plane's
// health port, summed over the ready pods; a pod not ready is named, not
// read; reads are cached for trafficFresh, whatever the snapshots.
func TestTrafficThroughThePodProxy(t *testing.T) {
	dp := startDataPlane(t)
	dp.get(80, "/web", 2)
	client := fake.NewClientset(dataPlanePod("gw1", "dp-a", true), dataPlanePod("gw1", "dp-b", true),
		dataPlanePod("gw1", "dp-c", false), dataPlanePod("another", "dp-x", true))
	asked := proxyPods(client, func(string) proxied { return proxied{data: dp.exposition()} })
	r, clk, _ := testReader(t, client)

	first := []Gateway{shownGateway("gw1")}
	r.attach(first)
	if tr := first[0].Traffic; tr == nil || !strings.Contains(tr.Reason, "first read is under way") {
		t.Fatalf("before the first read: %+v", tr)
	}
	r.reads.Wait()
	gws := attachNow(r, shownGateway("gw1"))
	tr := gws[0].Traffic
	if tr == nil || tr.Reason != "" || tr.PodsFound != 3 || tr.PodsRead != 2 || len(tr.NotRead) != 1 ||
		tr.NotRead[0].Pod != "dp-c" || !strings.Contains(tr.NotRead[0].Reason, "pod not ready") {
		t.Fatalf("traffic %+v", tr)
	}
	if web := rowNamed(tr.Routes, "ns/web"); web.Requests != 4 || web.Codes["2xx"] != 4 {
		t.Errorf("ns/web over two pods: %+v", web)
	}
	if len(*asked) != 2 {
		t.Fatalf("%d scrapes, want 2", len(*asked))
	}
	for _, a := range *asked {
		if a.GetNamespace() != dpNamespace || a.GetPort() != "15021" || a.GetPath() != "metrics" || a.GetScheme() != "http" {
			t.Errorf("scraped %s %s:%s/%s over %s", a.GetNamespace(), a.GetName(), a.GetPort(), a.GetPath(), a.GetScheme())
		}
	}

	// Pages polling within trafficFresh share the read.
	for range 5 {
		attachNow(r, shownGateway("gw1"))
	}
	r.refresh()
	r.reads.Wait()
	if len(*asked) != 2 {
		t.Errorf("%d scrapes after polls within %s, want 2", len(*asked), trafficFresh)
	}

	// Later, the ticker's refresh reads again, and a rate comes out.
	dp.get(80, "/web", 3)
	clk.Step(trafficFresh)
	r.refresh()
	r.reads.Wait()
	gws = attachNow(r, shownGateway("gw1"))
	tr = gws[0].Traffic
	web := rowNamed(tr.Routes, "ns/web")
	if len(*asked) != 4 || tr.RateSeconds != trafficFresh.Seconds() || web.Rate == nil || *web.Rate != 6/trafficFresh.Seconds() {
		t.Errorf("after %s: %d scrapes, rate %v over %vs; want 4 scrapes, 6 requests more", trafficFresh, len(*asked), web.Rate, tr.RateSeconds)
	}

	// Nobody looks for trafficForget: the Gateway is forgotten.
	clk.Step(trafficForget + time.Second)
	r.refresh()
	r.reads.Wait()
	if len(*asked) != 4 || len(r.entries) != 0 {
		t.Errorf("a Gateway nobody shows: %d scrapes, %d entries", len(*asked), len(r.entries))
	}
}

// Refusals say which right is missing: list on pods, get on pods/proxy.
func TestTrafficRBACRefused(t *testing.T) {
	forbidden := func(resource string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New(`User "system:serviceaccount:kube-system:cloud-controller-manager" cannot do it`))
	}
	t.Run("pods", func(t *testing.T) {
		client := fake.NewClientset(dataPlanePod("gw1", "dp-a", true))
		client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, forbidden("pods")
		})
		r, _, _ := testReader(t, client)
		tr := attachNow(r, shownGateway("gw1"))[0].Traffic
		if tr.PodsRead != 0 || !strings.Contains(tr.Reason, "RBAC refused (list pods)") {
			t.Errorf("traffic %+v", tr)
		}
	})
	t.Run("pods/proxy", func(t *testing.T) {
		client := fake.NewClientset(dataPlanePod("gw1", "dp-a", true))
		proxyPods(client, func(string) proxied { return proxied{err: forbidden("pods/proxy")} })
		r, _, _ := testReader(t, client)
		tr := attachNow(r, shownGateway("gw1"))[0].Traffic
		if tr.PodsFound != 1 || tr.PodsRead != 0 || len(tr.NotRead) != 1 || !strings.Contains(tr.NotRead[0].Reason, "RBAC refused (get pods/proxy)") {
			t.Errorf("traffic %+v", tr)
		}
	})
}

// A Gateway whose pods do not answer times out alone: another's read ends
// meanwhile.
func TestTrafficSlowGatewayDelaysNoOther(t *testing.T) {
	dp := startDataPlane(t)
	client := fake.NewClientset(dataPlanePod("slow", "slow-a", true), dataPlanePod("slow", "slow-b", true), dataPlanePod("quick", "quick-a", true))
	r, _, ended := testReader(t, client)
	r.timeout = 200 * time.Millisecond
	release := make(chan struct{})
	r.scrape = func(ctx context.Context, _, pod string) ([]byte, error) {
		if strings.HasPrefix(pod, "slow") {
			<-release
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return dp.exposition(), nil
	}
	gws := []Gateway{shownGateway("slow"), shownGateway("quick")}
	r.attach(gws)
	deadline := time.Now().Add(10 * time.Second)
	for ended.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read ended while one Gateway's pods hang")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.attach(gws)
	if tr := gws[1].Traffic; tr.PodsRead != 1 {
		t.Errorf("quick: %+v", tr)
	}
	if tr := gws[0].Traffic; !strings.Contains(tr.Reason, "first read is under way") {
		t.Errorf("slow, still reading: %+v", tr)
	}
	close(release)
	r.reads.Wait()
	r.attach(gws)
	tr := gws[0].Traffic
	if tr.PodsRead != 0 || len(tr.NotRead) != 2 || !strings.Contains(tr.NotRead[0].Reason, "timed out after 200ms") {
		t.Errorf("slow: %+v", tr)
	}
}

// At most maxPodsPerGateway pods are read; the others are named with why.
func TestTrafficPodsBounded(t *testing.T) {
	dp := startDataPlane(t)
	var objs []runtime.Object
	for i := range maxPodsPerGateway + 2 {
		objs = append(objs, dataPlanePod("gw1", fmt.Sprintf("dp-%02d", i), true))
	}
	client := fake.NewClientset(objs...)
	proxyPods(client, func(string) proxied { return proxied{data: dp.exposition()} })
	r, _, _ := testReader(t, client)
	tr := attachNow(r, shownGateway("gw1"))[0].Traffic
	if tr.PodsFound != maxPodsPerGateway+2 || tr.PodsRead != maxPodsPerGateway || len(tr.NotRead) != 2 ||
		tr.NotRead[1].Pod != fmt.Sprintf("dp-%02d", maxPodsPerGateway+1) || !strings.Contains(tr.NotRead[1].Reason, "beyond") {
		t.Errorf("traffic %+v", tr)
	}
}

// What is not a data plane's answer, or no pod at all, or no data plane
// Service, is said as such; another class's Gateway gets nothing.
func TestTrafficNotRead(t *testing.T) {
	leaving := dataPlanePod("gw5", "dp-z", true)
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	leaving.Finalizers = []string{"example.com/hold"}
	client := fake.NewClientset(dataPlanePod("gw1", "dp-a", true), leaving)
	proxyPods(client, func(string) proxied { return proxied{data: []byte("# TYPE up gauge\nup 1\n")} })
	r, _, _ := testReader(t, client)
	noService := shownGateway("gw3")
	noService.dataPlaneNamespace = ""
	other := shownGateway("gw4")
	other.Outrigger = false
	gws := attachNow(r, shownGateway("gw1"), shownGateway("gw2"), noService, other, shownGateway("gw5"))
	if tr := gws[4].Traffic; tr.PodsFound != 1 || len(tr.NotRead) != 1 || tr.NotRead[0].Reason != "pod terminating" {
		t.Errorf("a pod terminating: %+v", tr)
	}
	if tr := gws[0].Traffic; len(tr.NotRead) != 1 || !strings.Contains(tr.NotRead[0].Reason, "metrics unreadable") {
		t.Errorf("not a data plane: %+v", tr)
	}
	if tr := gws[1].Traffic; tr.PodsFound != 0 || !strings.Contains(tr.Reason, "no data plane pods") {
		t.Errorf("no pods: %+v", tr)
	}
	if tr := gws[2].Traffic; tr == nil || !strings.Contains(tr.Reason, "no load balancer Service") {
		t.Errorf("no Service: %+v", tr)
	}
	if gws[3].Traffic != nil {
		t.Errorf("another class's Gateway: %+v", gws[3].Traffic)
	}
}

// At most maxTrafficGateways of the Gateways a snapshot shows are read.
func TestTrafficGatewaysBounded(t *testing.T) {
	r, _, _ := testReader(t, fake.NewClientset())
	var gws []Gateway
	for i := range maxTrafficGateways + 1 {
		gws = append(gws, shownGateway(fmt.Sprintf("gw%02d", i)))
	}
	gws = attachNow(r, gws...)
	if len(r.entries) != maxTrafficGateways {
		t.Errorf("%d Gateways read, want %d", len(r.entries), maxTrafficGateways)
	}
	if tr := gws[maxTrafficGateways].Traffic; tr == nil || !strings.Contains(tr.Reason, "filter to read") {
		t.Errorf("the Gateway beyond the bound: %+v", tr)
	}
}
