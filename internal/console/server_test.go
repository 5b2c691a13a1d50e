package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/outrigger-ccm/outrigger/internal/poll"
	"github.com/outrigger-ccm/outrigger/internal/testclock"
)

type recordingActions struct{ done []string }

func (a *recordingActions) List() []Action {
	return []Action{{Name: "stop", Label: "Stop", Target: "node"}}
}
func (a *recordingActions) Do(_ context.Context, name, target string) (string, error) {
	if name != "stop" {
		return "", ErrUnknownAction
	}
	a.done = append(a.done, name+" "+target)
	return "stopped " + target, nil
}

func newTestServer(t *testing.T, opts Options, objects ...runtime.Object) (*httptest.Server, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objects...)
	opts.Client = client
	s := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Start(ctx) }()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, client
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestPageIsSelfContained(t *testing.T) {
	srv, _ := newTestServer(t, Options{})
	resp, body := get(t, srv.URL+"/")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "<title>Outrigger console</title>") {
		t.Fatalf("GET /: %s\n%s", resp.Status, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, asset := range []string{"app.js", "style.css"} {
		if r, b := get(t, srv.URL+"/"+asset); r.StatusCode != http.StatusOK || len(b) == 0 {
			t.Errorf("%s: %s", asset, r.Status)
		}
	}
	// Nothing is fetched from elsewhere (the SVG namespace is a name, not
	// a fetch).
	for _, asset := range []string{"/", "/app.js", "/style.css"} {
		_, b := get(t, srv.URL+asset)
		b = strings.ReplaceAll(b, "http://www.w3.org/2000/svg", "")
		if strings.Contains(b, "http://") || strings.Contains(b, "https://") || strings.Contains(b, "//cdn") {
			t.Errorf("%s refers to another origin", asset)
		}
	}
}

func TestSnapshotAndStream(t *testing.T) {
	svc := lbService("web", withVIP("127.0.100.1"))
	node := testNode("node-1", "127.1.0.1", true)
	srv, _ := newTestServer(t, Options{Ranges: []Range{{Name: "lb", Prefix: mustPrefix("127.0.100.0/24")}}}, svc, node)

	_, body := get(t, srv.URL+"/api/snapshot")
	var snap Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(snap.LoadBalancers) != 1 || snap.LoadBalancers[0].VIPs[0] != "127.0.100.1" || len(snap.Nodes) != 1 || snap.Pools[0].Used != 1 {
		t.Errorf("snapshot: %s", body)
	}
	if snap.Actions != nil {
		t.Errorf("read-only by default, got actions %v", snap.Actions)
	}

	resp, err := http.Get(srv.URL + "/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	seen := map[string]bool{}
	for !seen["snapshot"] || !seen["calls"] {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		if ev, ok := strings.CutPrefix(strings.TrimSpace(line), "event: "); ok {
			seen[ev] = true
		}
	}
}

// TestViewsOverHTTP: the page's filters reach the server as a query, a
// stream carries its view's rows, and a malformed view is refused.
func TestViewsOverHTTP(t *testing.T) {
	srv, _ := newTestServer(t, Options{}, lbService("web", withVIP("127.0.100.1")), lbService("api"),
		testNode("node-1", "127.1.0.1", true), testNode("node-2", "127.1.0.2", false))

	_, body := get(t, srv.URL+"/api/snapshot?notReady=1&nodes=NODE-2")
	var snap Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if len(snap.LoadBalancers) != 1 || snap.LoadBalancers[0].Name != "api" || snap.LoadBalancerCount != (Count{Total: 2, Ready: 1, Matching: 1}) {
		t.Errorf("Services of the view: %+v, %+v", snap.LoadBalancers, snap.LoadBalancerCount)
	}
	if len(snap.Nodes) != 1 || snap.Nodes[0].Name != "node-2" || snap.NodeCount != (Count{Total: 2, Ready: 1, Matching: 1}) {
		t.Errorf("nodes of the view: %+v, %+v", snap.Nodes, snap.NodeCount)
	}

	resp, err := http.Get(srv.URL + "/api/stream?services=web")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"loadBalancerCount"`) {
			var snap Snapshot
			if err := json.Unmarshal([]byte(data), &snap); err != nil {
				t.Fatal(err)
			}
			if len(snap.LoadBalancers) != 1 || snap.LoadBalancers[0].Name != "web" {
				t.Errorf("the stream of services=web carries %+v", snap.LoadBalancers)
			}
			break
		}
	}

	for _, path := range []string{"/api/snapshot", "/api/stream"} {
		resp, body := get(t, srv.URL+path+"?services="+strings.Repeat("x", maxFilter+1))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "longer than") {
			t.Errorf("%s with a long filter: %d %q, want 400", path, resp.StatusCode, body)
		}
	}
}

// TestViewSnapshotsBounded: a page typing a filter asks for a view per
// keystroke; the server keeps the last maxViews of them.
func TestViewSnapshotsBounded(t *testing.T) {
	s := New(Options{Client: fake.NewClientset(lbService("web"))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	for i := range maxViews + 10 {
		if data, _ := s.snapshotJSON(View{Nodes: fmt.Sprint(i)}); len(data) == 0 {
			t.Fatal("no snapshot")
		}
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if len(s.snaps) != maxViews {
		t.Errorf("%d views kept, want %d", len(s.snaps), maxViews)
	}
	if _, ok := s.snaps[View{Nodes: fmt.Sprint(maxViews + 9)}]; !ok {
		t.Error("the last view asked for is not kept")
	}
}

func TestActions(t *testing.T) {
	post := func(url, body string, header bool) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/api/actions", strings.NewReader(body))
		if header {
			req.Header.Set("X-Outrigger-Console", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	readOnly, _ := newTestServer(t, Options{})
	if code, body := post(readOnly.URL, `{"name":"stop","target":"node-1"}`, true); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("read-only console: %d %s", code, body)
	}

	acts := &recordingActions{}
	srv, _ := newTestServer(t, Options{Actions: acts})
	cases := []struct {
		name   string
		body   string
		header bool
		want   int
	}{
		{"without the header", `{"name":"stop","target":"node-1"}`, false, http.StatusForbidden},
		{"unknown", `{"name":"explode"}`, true, http.StatusBadRequest},
		{"malformed", `{`, true, http.StatusBadRequest},
		{"stop", `{"name":"stop","target":"node-1"}`, true, http.StatusOK},
	}
	for _, tc := range cases {
		if code, body := post(srv.URL, tc.body, tc.header); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if len(acts.done) != 1 || acts.done[0] != "stop node-1" {
		t.Errorf("actions run: %v", acts.done)
	}
}

func TestForbiddenResourcesAreNamed(t *testing.T) {
	client := fake.NewClientset(lbService("web"))
	client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", nil)
	})
	s := New(Options{Client: client})
	snap := s.Snapshot(View{})
	if len(snap.Warnings) != 1 || !strings.Contains(snap.Warnings[0], "Events are not shown") {
		t.Errorf("warnings: %v", snap.Warnings)
	}
	if len(snap.LoadBalancers) != 1 || snap.LoadBalancers[0].Reason != "NotSyncedYet" {
		t.Errorf("the rest still shows: %+v", snap.LoadBalancers)
	}
}

// countingGatherer counts the registry reads the console makes.
type countingGatherer struct{ n atomic.Int64 }

func (g *countingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.n.Add(1)
	return nil, nil
}

// A console nobody opens costs nothing: no registry read every second
// until the first request, and the charts move from then on, a read per
// interval. The intervals pass on the console's clock, stepped by the test.
func TestUnvisitedConsoleDoesNotSample(t *testing.T) {
	g := &countingGatherer{}
	clk := testclock.New(time.Now())
	s := New(Options{Client: fake.NewClientset(), Gatherer: g, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Start(ctx) }()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	poll.Until(t, 10*time.Second, "Start to wait for the first request", s.awaitsVisit.Load)
	clk.Step(20 * s.opts.Interval)
	if n := g.n.Load(); n != 0 {
		t.Fatalf("an unvisited console read the metrics %d times", n)
	}
	if n := clk.Waiters(); n != 0 {
		t.Fatalf("an unvisited console keeps %d timers", n)
	}
	get(t, srv.URL+"/api/snapshot")
	poll.Until(t, 10*time.Second, "the first read of the metrics, at the first request", func() bool { return g.n.Load() == 1 })
	// The sampling's ticker, then one read per interval.
	poll.Until(t, 10*time.Second, "the sampling's ticker on the clock", clk.HasWaiters)
	for want := int64(2); want <= 4; want++ {
		clk.Step(s.opts.Interval)
		poll.Until(t, 10*time.Second, fmt.Sprintf("read %d of the metrics, an interval later", want), func() bool { return g.n.Load() == want })
	}
}

// A node's heartbeat changes nothing the page shows, so it is no reason to
// rebuild the snapshot; a change of its row is.
func TestHeartbeatsAreNoChange(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}}
	client := fake.NewClientset(node)
	s := New(Options{Client: client})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = s.Start(ctx) }()
	if got := s.Snapshot(View{}); len(got.Nodes) != 1 {
		t.Fatalf("nodes %v, want node-1", got.Nodes)
	}
	before := s.version.Load()
	update := func(mutate func(*corev1.Node)) {
		n, err := client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(n)
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		update(func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Duration(i+1) * time.Second))
		})
	}
	update(func(n *corev1.Node) { n.Spec.ProviderID = "sim://i-1" })
	// Events arrive in order: once the visible change is counted, the
	// heartbeats before it were seen too.
	deadline := time.Now().Add(10 * time.Second)
	for s.version.Load() == before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := s.version.Load() - before; got != 1 {
		t.Errorf("three heartbeats and one providerID change counted as %d changes, want 1", got)
	}
}

// A console nobody looks at stops its watches (and its sampling): after
// IdleAfter without a request every watch it opened is stopped; the next
// request starts them again and sees what changed meanwhile. An open page
// (a stream) keeps them however long it stays.
func TestWatchesStopWhenNobodyLooks(t *testing.T) {
	client := fake.NewClientset(lbService("web"))
	var mu sync.Mutex
	var watchers []*watch.RaceFreeFakeWatcher
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		mu.Lock()
		watchers = append(watchers, w)
		mu.Unlock()
		return true, w, nil
	})
	open := func() (all, stopped int) {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range watchers {
			all++
			if w.IsStopped() {
				stopped++
			}
		}
		return all, stopped
	}
	s := New(Options{Client: client, IdleAfter: 50 * time.Millisecond, Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	if got := s.Snapshot(View{}).LoadBalancers; len(got) != 1 {
		t.Fatalf("first snapshot: %d Services, want 1", len(got))
	}
	first, _ := open()
	if first == 0 {
		t.Fatal("the first request opened no watch")
	}
	waitFor("every watch stopped once nobody looks", func() bool { all, stopped := open(); return all == stopped })

	// Changed while nobody looked: the next request sees it, through new
	// watches.
	if _, err := client.CoreV1().Services("default").Create(ctx, lbService("api"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := s.Snapshot(View{}).LoadBalancers; len(got) != 2 {
		t.Errorf("snapshot after the pause: %d Services, want 2", len(got))
	}
	if all, stopped := open(); all <= first || all == stopped {
		t.Errorf("watches after the next request: %d opened, %d stopped; want new ones running", all, stopped)
	}

	// A stream open for several idle periods keeps them.
	_, release := s.use()         // as a stream holds them
	passes := s.reaps.Load() + 20 // 20 reaper passes: 4 idle periods
	waitFor("20 reaper passes with a page open", func() bool { return s.reaps.Load() >= passes })
	if all, stopped := open(); all == stopped {
		t.Fatal("the watches stopped while a page was open")
	}
	release()
	waitFor("every watch stopped after the page closed", func() bool { all, stopped := open(); return all == stopped })
}
