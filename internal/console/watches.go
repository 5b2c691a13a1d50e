// The console's informers: started on the first visit, shared with
// Outrigger's own Node informer where it can be, stopped when nobody has
// looked for a while.

package console

import (
	"context"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/outrigger-ccm/outrigger/internal/controllers/cachednodes"
	"k8s.io/client-go/tools/cache"
)

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

// noListers list nothing: what is not watched (not allowed, not served,
// or no cluster at all) shows as empty.
var noListers = listers{
	services: func() []*corev1.Service { return nil },
	nodes:    func() []*corev1.Node { return nil },
	slices:   func() []*discoveryv1.EndpointSlice { return nil },
	events:   func() []*corev1.Event { return nil },
	gateways: func() gatewayInputs { return gatewayInputs{} },
}

// New returns a console; Start samples the metrics and must run for the
// charts to move.

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

// startWatches starts the informers, for what the client may list; what
// it may not is named in the page's warnings instead of retried for ever.
// They run until reap stops them or the console's life ends. s.mu held.
func (s *Server) startWatches() *watches {
	ctx, stop := context.WithCancel(s.life)
	w := &watches{ready: make(chan struct{}), stop: stop, lastUsed: s.opts.Clock.Now(), listers: noListers}
	c := s.opts.Client
	if c == nil {
		// No cluster of its own (tenant mode): nothing to watch.
		close(w.ready)
		return w
	}
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
