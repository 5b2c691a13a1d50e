package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

//go:embed assets
var assets embed.FS

// syncWait bounds how long a request waits for the informers' first sync.
const syncWait = 30 * time.Second

// Options configure a console.
type Options struct {
	// Client reads Services, Nodes, EndpointSlices and Events, and
	// discovers whether the Gateway API is served.
	Client kubernetes.Interface
	// Gateway, when set, reads GatewayClasses, Gateways and their routes
	// (HTTPRoute, GRPCRoute, TCPRoute, UDPRoute, TLSRoute) where the Gateway API is
	// served.
	// Nil: the page says Gateways are not read.
	Gateway gwclient.Interface
	// Gatherer gives the call layer's metrics: controller-runtime's
	// registry in-process, a ScrapeGatherer apart. Nil leaves the charts
	// empty.
	Gatherer prometheus.Gatherer
	// Ranges are the address ranges whose usage the page shows.
	Ranges []Range
	// RangeSource, when set, adds ranges the provider knows of.
	RangeSource RangeSource
	// Class is the loadBalancerClass this Outrigger owns ("" for
	// Services without a class), when Owners is empty.
	Class string
	// Owners are the providers of this Outrigger and what each serves.
	// Empty: one unnamed provider serving every node and Class.
	Owners []Owner
	// Nodes, when set, is the node cache the console reads (the manager's,
	// shared with the controllers) instead of a node informer of its own.
	Nodes crcache.Informers
	// Degraded, when set, says which provider method families are
	// degraded (calls abandoned at their deadline and not returned): the
	// page shows each as a badge.
	Degraded func() []string
	// Actions, when set, makes the page offer them. Nil: read-only.
	Actions Actions
	// Interval is how often the metrics are sampled and changes pushed.
	// Default 1s.
	Interval time.Duration
	// History is how many samples the charts keep. Default 300.
	History int
	// IdleAfter is how long after the last page or request the console's
	// watches (and its metrics sampling) stop, until the next request.
	// Default 5m.
	IdleAfter time.Duration
	// Log receives the console's own errors.
	Log logr.Logger
	// Clock times the sampling and pushes (Interval), the idle watches
	// (IdleAfter) and the snapshots' ages. Default: the real clock; tests
	// pass a fake one and step it through the intervals.
	Clock clock.WithTicker
}

// RangeSource is what a provider implements to show its address ranges
// (a VIP pool, say) on the console, without the console knowing the
// provider. It is asked at every snapshot, so ranges may change.
type RangeSource interface {
	ConsoleRanges() []Range
}

// Server serves the console. Its informers start on the first request, so
// a manager that serves the console but is never asked pays nothing.
type Server struct {
	opts    Options
	sampler *sampler

	visitOnce sync.Once
	// visited is closed at the first request: the metrics sampling waits
	// for it, so that an unvisited console gathers nothing every second.
	visited chan struct{}
	// awaitsVisit is set once Start waits for the first request (tests
	// wait on it).
	awaitsVisit atomic.Bool
	// life ends when Start's context does; the informers stop with it.
	life    context.Context
	endLife context.CancelFunc

	// mu guards w, the running watches: nil until a request needs them,
	// and again once nobody has looked for IdleAfter.
	mu sync.Mutex
	w  *watches
	// reaps counts reap's passes (tests wait on it).
	reaps atomic.Uint64

	version atomic.Uint64 // bumped by every informer event
	changed chan struct{} // poked, without blocking, by the same

	// lastDegraded is what Degraded said at the last sample.
	lastDegraded string

	callsMu sync.Mutex
	calls   []Entry // call-layer timeline entries, newest last

	snapMu sync.Mutex
	snaps  map[View]*viewSnapshot // the last snapshot of each view asked for
}

// viewSnapshot is the JSON of one view's last snapshot.
type viewSnapshot struct {
	data    []byte
	version uint64    // the change count it is current to
	at      time.Time // when it was built
	used    time.Time // when it was last asked for
}

// maxViews bounds the views whose snapshots are kept: pages with the same
// filters share one; a page typing a filter asks for one per keystroke.
const maxViews = 32

// watches are the informers a console runs while someone looks, and what
// they found.
type watches struct {
	listers  listers
	ready    chan struct{} // closed once they synced
	warnings []string
	// noGateways says why Gateways are not read at all, or "".
	noGateways string
	stop       context.CancelFunc
	// users is how many requests use them now (an open stream is one);
	// lastUsed when the last ended.
	users    int
	lastUsed time.Time
}

type listers struct {
	services  func() []*corev1.Service
	nodes     func() []*corev1.Node
	slices    func() []*discoveryv1.EndpointSlice
	events    func() []*corev1.Event
	gateways  func() gatewayInputs
	hasSynced []cache.InformerSynced
}

// New returns a console; Start samples the metrics and must run for the
// charts to move.
func New(opts Options) *Server {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.History <= 0 {
		opts.History = 300
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = 5 * time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	var g prometheus.Gatherer = prometheus.Gatherers{}
	if opts.Gatherer != nil {
		g = opts.Gatherer
	}
	life, end := context.WithCancel(context.Background())
	return &Server{opts: opts, sampler: newSampler(g, opts.History), life: life, endLife: end,
		visited: make(chan struct{}), changed: make(chan struct{}, 1)}
}

// Start samples the call metrics every Interval, from the first request
// on, until ctx ends; the informers started by requests stop then too. It
// is a controller-runtime Runnable, so a manager can run it.
func (s *Server) Start(ctx context.Context) error {
	defer s.endLife()
	// Gathering the whole registry every second is garbage every second:
	// nobody has asked for the charts until someone opens the console.
	s.awaitsVisit.Store(true)
	select {
	case <-ctx.Done():
		return nil
	case <-s.visited:
	}
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	s.sample(s.opts.Clock.Now())
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C():
			if s.reap(now) {
				s.sample(now)
			}
		}
	}
}

// reap stops the watches when nobody has used them for IdleAfter, and
// reports whether they still run: a console left open in a tab that was
// closed must not keep cluster-wide watches, nor gather the metrics every
// second, for the rest of the process's life.
func (s *Server) reap(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.reaps.Add(1)
	if s.w == nil {
		return false
	}
	if s.w.users == 0 && now.Sub(s.w.lastUsed) >= s.opts.IdleAfter {
		s.w.stop()
		s.w = nil
		s.opts.Log.V(2).Info("Console idle: its watches stopped until the next request", "idleAfter", s.opts.IdleAfter)
		return false
	}
	return true
}

// use returns the running watches, starting them if none run, and a
// release to call when the request is done with them.
func (s *Server) use() (*watches, func()) {
	s.visitOnce.Do(func() { close(s.visited) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		s.w = s.startWatches()
	}
	w := s.w
	w.users++
	return w, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		w.users--
		w.lastUsed = s.opts.Clock.Now()
	}
}

// NeedLeaderElection implements controller-runtime's
// LeaderElectionRunnable: every replica serves its console.
func (s *Server) NeedLeaderElection() bool { return false }

func (s *Server) sample(now time.Time) {
	if s.opts.Degraded != nil {
		// A family's state changes without any object changing: a new
		// snapshot carries the badge.
		d := strings.Join(s.opts.Degraded(), "\n")
		if d != s.lastDegraded {
			s.lastDegraded = d
			s.poke()
		}
	}
	entries := s.sampler.take(now)
	if len(entries) == 0 {
		return
	}
	s.callsMu.Lock()
	s.calls = append(s.calls, entries...)
	if len(s.calls) > maxTimeline {
		s.calls = s.calls[len(s.calls)-maxTimeline:]
	}
	s.callsMu.Unlock()
	s.poke()
}

func (s *Server) poke() {
	s.version.Add(1)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// startWatches starts the informers, for what the client may list; what
// it may not is named in the page's warnings instead of retried for ever.
// They run until reap stops them or the console's life ends. s.mu held.
func (s *Server) startWatches() *watches {
	ctx, stop := context.WithCancel(s.life)
	w := &watches{ready: make(chan struct{}), stop: stop, lastUsed: s.opts.Clock.Now()}
	c := s.opts.Client
	strip := func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}
	main := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTransform(strip))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	// A node's heartbeat (every kubelet, every few seconds) changes
	// nothing the page shows: only a change of its row is news.
	nodeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.poke() },
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || !reflect.DeepEqual(nodeView(on), nodeView(nn)) {
				s.poke()
			}
		},
		DeleteFunc: func(any) { s.poke() },
	}
	w.listers = listers{
		services: func() []*corev1.Service { return nil },
		nodes:    func() []*corev1.Node { return nil },
		slices:   func() []*discoveryv1.EndpointSlice { return nil },
		events:   func() []*corev1.Event { return nil },
		gateways: func() gatewayInputs { return gatewayInputs{} },
	}
	probe := func(what string, list func(context.Context, metav1.ListOptions) error) bool {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := list(pctx, metav1.ListOptions{Limit: 1})
		switch {
		case err == nil:
			return true
		case apierrors.IsForbidden(err):
			w.warnings = append(w.warnings, fmt.Sprintf("%s are not shown: this console's identity may not list them (%v)", what, err))
		default:
			w.warnings = append(w.warnings, fmt.Sprintf("%s are not shown: %v", what, err))
		}
		return false
	}
	if probe("Services", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := c.CoreV1().Services("").List(ctx, o)
		return err
	}) {
		inf := main.Core().V1().Services()
		_, _ = inf.Informer().AddEventHandler(handler)
		w.listers.services = func() []*corev1.Service { l, _ := inf.Lister().List(labels.Everything()); return l }
		w.listers.hasSynced = append(w.listers.hasSynced, inf.Informer().HasSynced)
	}
	switch {
	case s.opts.Nodes != nil:
		s.shareNodes(ctx, w, nodeHandler)
	case probe("Nodes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := c.CoreV1().Nodes().List(ctx, o)
		return err
	}):
		inf := main.Core().V1().Nodes()
		_, _ = inf.Informer().AddEventHandler(nodeHandler)
		w.listers.nodes = func() []*corev1.Node { l, _ := inf.Lister().List(labels.Everything()); return l }
		w.listers.hasSynced = append(w.listers.hasSynced, inf.Informer().HasSynced)
	}
	if probe("EndpointSlices", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := c.DiscoveryV1().EndpointSlices("").List(ctx, o)
		return err
	}) {
		inf := main.Discovery().V1().EndpointSlices()
		_, _ = inf.Informer().AddEventHandler(handler)
		w.listers.slices = func() []*discoveryv1.EndpointSlice { l, _ := inf.Lister().List(labels.Everything()); return l }
		w.listers.hasSynced = append(w.listers.hasSynced, inf.Informer().HasSynced)
	}
	eventKinds := []string{"Service", "Node"}
	if s.watchGateways(ctx, w, handler, probe) {
		eventKinds = append(eventKinds, "Gateway")
	}
	// Events only about what the page shows: the rest of a busy
	// cluster's Events would cost memory and show nothing of ours.
	var eventListers []func() []*corev1.Event
	if probe("Events", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := c.CoreV1().Events("").List(ctx, o)
		return err
	}) {
		for _, kind := range eventKinds {
			f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTransform(strip),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "involvedObject.kind=" + kind }))
			inf := f.Core().V1().Events()
			_, _ = inf.Informer().AddEventHandler(handler)
			eventListers = append(eventListers, func() []*corev1.Event { l, _ := inf.Lister().List(labels.Everything()); return l })
			w.listers.hasSynced = append(w.listers.hasSynced, inf.Informer().HasSynced)
			f.Start(ctx.Done())
		}
		w.listers.events = func() []*corev1.Event {
			var out []*corev1.Event
			for _, l := range eventListers {
				out = append(out, l()...)
			}
			return out
		}
	}
	main.Start(ctx.Done())
	go func() {
		cache.WaitForCacheSync(ctx.Done(), w.listers.hasSynced...)
		close(w.ready)
	}()
	return w
}

// Snapshot builds the current snapshot of view; the tests and the JSON
// endpoint use it.
func (s *Server) Snapshot(view View) Snapshot {
	w, release := s.use()
	defer release()
	// A resource listed but never synced (a watch refused, say) must not
	// hang every page: after a while, show what there is.
	select {
	case <-w.ready:
	case <-time.After(syncWait):
	}
	ranges := s.opts.Ranges
	if s.opts.RangeSource != nil {
		ranges = append(append([]Range(nil), ranges...), s.opts.RangeSource.ConsoleRanges()...)
	}
	s.callsMu.Lock()
	calls := append([]Entry(nil), s.calls...)
	s.callsMu.Unlock()
	snap := build(inputs{
		now:      s.opts.Clock.Now(),
		services: w.listers.services(),
		nodes:    w.listers.nodes(),
		slices:   w.listers.slices(),
		events:   w.listers.events(),
		gateways: w.listers.gateways(),
		ranges:   ranges,
		owners:   s.owners(),
		calls:    calls,
		view:     view,
	})
	snap.Warnings = append([]string(nil), w.warnings...)
	snap.NoGatewayAPI = w.noGateways
	if s.opts.Degraded != nil {
		snap.Degraded = s.opts.Degraded()
	}
	select {
	case <-w.ready:
	default:
		snap.Warnings = append(snap.Warnings, fmt.Sprintf("Still loading: the informers have not synced after %s", syncWait))
	}
	if s.opts.Actions != nil {
		snap.Actions = s.opts.Actions.List()
	}
	return snap
}

// snapshotJSON returns view's snapshot's JSON and the change count it is
// current to, rebuilt only when something changed since, and at most once
// per Interval: every open page with the same filters shares it.
func (s *Server) snapshotJSON(view View) ([]byte, uint64) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	now := s.opts.Clock.Now()
	v := s.version.Load()
	last := s.snaps[view]
	if last != nil && (v == last.version || now.Sub(last.at) < s.opts.Interval) {
		last.used = now
		return last.data, last.version
	}
	data, err := json.Marshal(s.Snapshot(view))
	if err != nil {
		s.opts.Log.Error(err, "Encoding the console snapshot")
		if last == nil {
			return nil, 0
		}
		return last.data, last.version
	}
	if s.snaps == nil {
		s.snaps = map[View]*viewSnapshot{}
	}
	if last == nil && len(s.snaps) >= maxViews {
		var oldest View
		first := true
		for k, o := range s.snaps {
			if first || o.used.Before(s.snaps[oldest].used) {
				oldest, first = k, false
			}
		}
		delete(s.snaps, oldest)
	}
	// v was read before building: a change during the build is sent
	// again next time, never lost.
	s.snaps[view] = &viewSnapshot{data: data, version: v, at: s.opts.Clock.Now(), used: now}
	return data, v
}

// Handler serves the page, its assets and its data, all under relative
// paths so that it can be mounted anywhere (/console/ on the secure port).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	mux.Handle("GET /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w)
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /api/snapshot", func(w http.ResponseWriter, r *http.Request) {
		view, err := ParseView(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		data, _ := s.snapshotJSON(view)
		_, _ = w.Write(data)
	})
	mux.HandleFunc("GET /api/calls", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.sampler.series())
	})
	mux.HandleFunc("GET /api/stream", s.stream)
	mux.HandleFunc("POST /api/actions", s.action)
	return mux
}

// setSecurityHeaders keeps the page to its own assets: nothing is loaded
// from elsewhere, and no other site may frame it.
func setSecurityHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// stream pushes the snapshot of the view the query asks for (ParseView)
// when it changes and the call series every interval, as server-sent
// events. A page whose filters change opens a new stream.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	view, err := ParseView(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	// An open page keeps the watches running, however quiet the cluster.
	_, release := s.use()
	defer release()
	ctx := r.Context()
	sent := ^uint64(0) // the change count the page has; none yet
	send := func(event string, data []byte) error {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	t := s.opts.Clock.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		if s.version.Load() != sent {
			snap, v := s.snapshotJSON(view)
			if snap != nil && v != sent {
				if err := send("snapshot", snap); err != nil {
					return
				}
				sent = v
			}
		}
		calls, _ := json.Marshal(s.sampler.series())
		if err := send("calls", calls); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// actionRequest is the body of POST api/actions.
type actionRequest struct {
	Name   string `json:"name"`
	Target string `json:"target"`
}

// action runs one of the Actions. A custom header is required, which a
// form on another site cannot send without a CORS preflight this server
// never answers.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	if s.opts.Actions == nil {
		http.Error(w, "the console is read-only: actions are off (outrigger dev --console-actions turns them on for the sim cloud)", http.StatusForbidden)
		return
	}
	if r.Header.Get("X-Outrigger-Console") != "1" {
		http.Error(w, "missing X-Outrigger-Console header", http.StatusForbidden)
		return
	}
	var req actionRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
		http.Error(w, "malformed action: "+err.Error(), http.StatusBadRequest)
		return
	}
	msg, err := s.opts.Actions.Do(r.Context(), req.Name, req.Target)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrUnknownAction) {
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	s.opts.Log.Info("Console action", "action", req.Name, "target", req.Target, "result", msg)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"result": msg})
}

// Owner is one provider of this Outrigger, with what it serves.
type Owner struct {
	// Provider is its name.
	Provider string
	// Class is the loadBalancerClass of its Services ("" for those
	// without a class).
	Class string
	// Platforms are the providerID schemes of its nodes; empty: all.
	Platforms []string
}

func (s *Server) owners() []Owner {
	if len(s.opts.Owners) > 0 {
		return s.opts.Owners
	}
	return []Owner{{Class: s.opts.Class}}
}

// shareNodes reads the nodes from the shared cache (Options.Nodes): one
// copy of every node in the process, not two. Its handler goes when the
// console's life ends; the cache is the manager's to stop.
func (s *Server) shareNodes(ctx context.Context, w *watches, handler cache.ResourceEventHandler) {
	inf, err := s.opts.Nodes.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		w.warnings = append(w.warnings, fmt.Sprintf("Nodes are not shown: %v", err))
		return
	}
	reg, err := inf.AddEventHandler(handler)
	if err != nil {
		w.warnings = append(w.warnings, fmt.Sprintf("Nodes are not shown: %v", err))
		return
	}
	go func() {
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg)
	}()
	list := cachednodes.FromCache(s.opts.Nodes)
	w.listers.nodes = func() []*corev1.Node {
		nodes, err := list(ctx)
		if err != nil {
			return nil
		}
		return nodes
	}
	w.listers.hasSynced = append(w.listers.hasSynced, reg.HasSynced)
}

// watchGateways starts informers on GatewayClasses, Gateways and the
// routes the cluster serves, and reports whether it did. A cluster without
// the Gateway API's CRDs is no error: the page says so in place of the
// table. w.warnings names what the console may not list.
func (s *Server) watchGateways(ctx context.Context, w *watches, handler cache.ResourceEventHandler, probe func(string, func(context.Context, metav1.ListOptions) error) bool) bool {
	if s.opts.Gateway == nil {
		w.noGateways = "This console does not read the Gateway API."
		return false
	}
	// Discovery, as the gateway controller's setup: the CRDs may be
	// missing, or some of them (an older release without TCPRoute).
	list, err := s.opts.Client.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		w.noGateways = fmt.Sprintf("The Gateway API (%s) is not served on this cluster: its CRDs are not installed.", gwv1.GroupVersion)
		return false
	case err != nil:
		w.warnings = append(w.warnings, fmt.Sprintf("Gateways are not shown: discovering %s: %v", gwv1.GroupVersion, err))
		return false
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	if !served["gateways"] || !served["gatewayclasses"] {
		w.noGateways = fmt.Sprintf("The Gateway API (%s) is served without Gateways or GatewayClasses.", gwv1.GroupVersion)
		return false
	}
	gc := s.opts.Gateway.GatewayV1()
	if !probe("GatewayClasses", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.GatewayClasses().List(ctx, o)
		return err
	}) || !probe("Gateways", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.Gateways("").List(ctx, o)
		return err
	}) {
		return false
	}
	strip := func(obj any) (any, error) {
		if m, ok := obj.(metav1.Object); ok {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}
	f := gwinformers.NewSharedInformerFactoryWithOptions(s.opts.Gateway, 0, gwinformers.WithTransform(strip))
	v1 := f.Gateway().V1()
	watch := func(inf cache.SharedIndexInformer) {
		_, _ = inf.AddEventHandler(handler)
		w.listers.hasSynced = append(w.listers.hasSynced, inf.HasSynced)
	}
	classes, gateways := v1.GatewayClasses(), v1.Gateways()
	watch(classes.Informer())
	watch(gateways.Informer())
	var routes []func() []routeIn
	if served["httproutes"] && probe("HTTPRoutes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.HTTPRoutes("").List(ctx, o)
		return err
	}) {
		inf := v1.HTTPRoutes()
		watch(inf.Informer())
		routes = append(routes, func() []routeIn { l, _ := inf.Lister().List(labels.Everything()); return httpRoutesIn(l) })
	}
	if served["grpcroutes"] && probe("GRPCRoutes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.GRPCRoutes("").List(ctx, o)
		return err
	}) {
		inf := v1.GRPCRoutes()
		watch(inf.Informer())
		routes = append(routes, func() []routeIn { l, _ := inf.Lister().List(labels.Everything()); return grpcRoutesIn(l) })
	}
	if served["tcproutes"] && probe("TCPRoutes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.TCPRoutes("").List(ctx, o)
		return err
	}) {
		inf := v1.TCPRoutes()
		watch(inf.Informer())
		routes = append(routes, func() []routeIn { l, _ := inf.Lister().List(labels.Everything()); return tcpRoutesIn(l) })
	}
	if served["udproutes"] && probe("UDPRoutes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.UDPRoutes("").List(ctx, o)
		return err
	}) {
		inf := v1.UDPRoutes()
		watch(inf.Informer())
		routes = append(routes, func() []routeIn { l, _ := inf.Lister().List(labels.Everything()); return udpRoutesIn(l) })
	}
	if served["tlsroutes"] && probe("TLSRoutes", func(ctx context.Context, o metav1.ListOptions) error {
		_, err := gc.TLSRoutes("").List(ctx, o)
		return err
	}) {
		inf := v1.TLSRoutes()
		watch(inf.Informer())
		routes = append(routes, func() []routeIn { l, _ := inf.Lister().List(labels.Everything()); return tlsRoutesIn(l) })
	}
	w.listers.gateways = func() gatewayInputs {
		var in gatewayInputs
		in.classes, _ = classes.Lister().List(labels.Everything())
		in.gateways, _ = gateways.Lister().List(labels.Everything())
		for _, r := range routes {
			in.routes = append(in.routes, r()...)
		}
		return in
	}
	f.Start(ctx.Done())
	return true
}
